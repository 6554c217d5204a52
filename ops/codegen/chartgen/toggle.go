package main

import (
	"fmt"
	"strings"
)

// Toggle is a boolean setting (default false) whose true only adds lines to
// objects the chart has anyway: an argument, an RBAC rule. Each object is
// templated with the setting off and on, and the lines only the second has
// are guarded by `if .Values.<Key>`. A toggle that removes or changes a
// line, or adds an object, fails the generation (make it a Variant).
type Toggle struct{ Key, Comment string }

// toggled templates o with each toggle on and folds the lines each adds
// into text, the template with all off.
func (c Chart) toggled(text string, o Object, on map[string][]Object, vals *values) (string, error) {
	for _, tg := range c.Toggles {
		docs := on[tg.Key]
		to := findDefault(docs, o, sentinelNamespace)
		dflt := findDefault(on["default "+tg.Key], o, c.DefaultNamespace)
		if to == nil || dflt == nil {
			return "", fmt.Errorf("%s=true: the object is not rendered", tg.Key)
		}
		onText, err := c.template(to, dflt, vals, false)
		if err != nil {
			return "", fmt.Errorf("%s=true: %w", tg.Key, err)
		}
		if text, err = guardInsertions(text, onText, ".Values."+tg.Key); err != nil {
			return "", fmt.Errorf("%s=true: %w", tg.Key, err)
		}
	}
	return text, nil
}

// toggleRenders renders variant v with each toggle on, with sentinels
// (under the toggle's key) and defaults ("default "+key), and fails when a
// toggle adds or drops an object.
func (c Chart) toggleRenders(v string, base []Object) (map[string][]Object, error) {
	out := map[string][]Object{}
	for _, tg := range c.Toggles {
		for _, sentinel := range []bool{true, false} {
			docs, err := renderDocs(c, Render{Sentinel: sentinel, Variant: v, On: []string{tg.Key}})
			if err != nil {
				return nil, err
			}
			key := tg.Key
			if !sentinel {
				key = "default " + key
			} else if len(docs) != len(base) {
				return nil, fmt.Errorf("%s=true renders %d objects, not %d: a toggle may only add lines to objects", tg.Key, len(docs), len(base))
			}
			out[key] = docs
		}
	}
	return out, nil
}

// guardInsertions returns base with the lines only on has, each run of
// them guarded by `if cond`; it fails unless on is base with lines inserted.
func guardInsertions(base, on, cond string) (string, error) {
	a, b := strings.Split(base, "\n"), strings.Split(on, "\n")
	// lcs[i][j] is the length of the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	if lcs[0][0] != len(a) {
		return "", fmt.Errorf("it changes or removes lines; chartgen guards only lines it adds")
	}
	var out, run []string
	flush := func() {
		if len(run) == 0 {
			return
		}
		pad := strings.Repeat(" ", indentOf(run[0]))
		out = append(out, pad+"{{- if "+cond+" }}")
		out = append(out, run...)
		out = append(out, pad+"{{- end }}")
		run = nil
	}
	i, j := 0, 0
	for j < len(b) {
		if i < len(a) && a[i] == b[j] && lcs[i][j] == lcs[i+1][j+1]+1 {
			flush()
			out = append(out, a[i])
			i++
		} else {
			run = append(run, b[j])
		}
		j++
	}
	flush()
	return strings.Join(out, "\n"), nil
}

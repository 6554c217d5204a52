package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ListValue is a list setting of the renderer (repeatable flags such as
// --mirror-dir or --agent-arg). The sentinel render is given the one item
// Sentinel; wherever it lands, the chart ranges over .Values.<Key>:
//
//   - a list item holding the sentinel as a whole scalar (an argument, a
//     resourceNames entry, a volume whose path it is) becomes one item per
//     element, and the list's key is left out when the list has no other
//     item and the value is empty (as the renderer leaves out an empty
//     field);
//   - inside a longer string, the sentinel may appear as a CEL list
//     (["S"], or `, "S"` after other items: admission.CELList) or as Go's
//     %v of a slice ([S], or ` S` after other items): the whole string
//     becomes one template expression.
//
// Anything else fails the generation (a sentinel left over).
type ListValue struct {
	Sentinel, Key, Comment string
	// Default is what the renderer uses when the setting is empty (nil:
	// nothing). It is the value's default, and the chart falls back to it
	// when the value is set empty, as the renderer does.
	Default []string
	// Index, when set, is a name the renderer numbers per item: in the
	// sentinel's item, Index+"0" becomes Index+"{{ $i }}".
	Index string
}

// expr is the list the chart ranges over.
func (l ListValue) expr() string {
	e := "$.Values." + l.Key
	if len(l.Default) > 0 {
		e = fmt.Sprintf("(%s | default (list %s))", e, quoteAll(l.Default))
	}
	return e
}

// defaultValue is the value's default in values.yaml.
func (l ListValue) defaultValue() []any {
	out := []any{}
	for _, s := range l.Default {
		out = append(out, s)
	}
	return out
}

// helpersFile holds the named templates the list expressions include:
// a CEL list literal (as admission.CELList writes it: Go-quoted items
// joined by ", "), the same items each after ", ", and Go's %v items each
// after a space.
func (c Chart) helpersFile() []byte {
	return []byte(fmt.Sprintf(`%[2]s
{{- define "%[1]s.celList" -}}
[{{ range $i, $v := . }}{{ if $i }}, {{ end }}{{ quote $v }}{{ end }}]
{{- end }}
{{- define "%[1]s.celItems" -}}
{{ range . }}, {{ quote . }}{{ end }}
{{- end }}
{{- define "%[1]s.goItems" -}}
{{ range . }} {{ . }}{{ end }}
{{- end }}
`, c.Name, GeneratedHeader))
}

// usesHelpers tells whether a template refers to helpersFile's templates.
func (c Chart) usesHelpers(text string) bool { return strings.Contains(text, `include "`+c.Name+".") }

// scalarExprs are the single-value sentinels and their expressions, rooted
// at $ so that they hold inside range and with blocks too.
func (c Chart) scalarExprs() [][2]string {
	out := [][2]string{
		{sentinelNamespace, "$.Release.Namespace"},
		{sentinelImage, `(print $.Values.image.repository ":" ($.Values.image.tag | default $.Chart.AppVersion))`},
	}
	for _, s := range c.Strings {
		out = append(out, [2]string{s.Sentinel, "$.Values." + s.Key})
	}
	return out
}

// listPatterns are the forms a list sentinel takes inside a longer string.
func (c Chart) listPatterns() [][2]string {
	var out [][2]string
	for _, l := range c.ListItems {
		e, s := l.expr(), l.Sentinel
		out = append(out,
			[2]string{`["` + s + `"]`, fmt.Sprintf(`(include %q %s)`, c.Name+".celList", e)},
			[2]string{`, "` + s + `"`, fmt.Sprintf(`(include %q %s)`, c.Name+".celItems", e)},
			[2]string{`[` + s + `]`, fmt.Sprintf(`(printf "[%%s]" (join " " %s))`, e)},
			[2]string{` ` + s, fmt.Sprintf(`(include %q %s)`, c.Name+".goItems", e)})
	}
	return out
}

// stringExpr returns the template expression for s when s holds a list
// sentinel inside other text; ok is false when it holds none, or is one
// (a list item, which rangeItems handles).
func (c Chart) stringExpr(s string) (expr string, ok bool, err error) {
	pats := c.listPatterns()
	has := false
	for _, l := range c.ListItems {
		if s == l.Sentinel {
			return "", false, nil
		}
		has = has || strings.Contains(s, l.Sentinel)
	}
	if !has {
		return "", false, nil
	}
	pats = append(pats, c.scalarExprs()...)
	var parts []string
	lit := func(t string) error {
		if strings.Contains(t, sentinelMark) {
			return fmt.Errorf("a sentinel in a form chartgen cannot template: %q", s)
		}
		if t != "" {
			parts = append(parts, strconv.Quote(t))
		}
		return nil
	}
	for rest := s; rest != ""; {
		at, which := -1, -1
		for i, p := range pats { // the earliest match; of those, the longest
			j := strings.Index(rest, p[0])
			if j >= 0 && (at < 0 || j < at || j == at && len(p[0]) > len(pats[which][0])) {
				at, which = j, i
			}
		}
		if at < 0 {
			if err := lit(rest); err != nil {
				return "", false, err
			}
			break
		}
		if err := lit(rest[:at]); err != nil {
			return "", false, err
		}
		parts = append(parts, pats[which][1])
		rest = rest[at+len(pats[which][0]):]
	}
	return "print " + strings.Join(parts, " "), true, nil
}

// listStrings replaces every string field of o that holds a list sentinel
// inside other text by a scalar token of its expression.
func (c Chart) listStrings(v any, put func(map[string]any, string, token)) error {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			s, isString := x.(string)
			if !isString {
				if err := c.listStrings(x, put); err != nil {
					return err
				}
				continue
			}
			expr, ok, err := c.stringExpr(s)
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			if ok {
				put(t, k, token{expr: expr, scalar: true, always: true})
			}
		}
	case []any:
		for _, x := range t {
			if s, isString := x.(string); isString {
				if _, ok, _ := c.stringExpr(s); ok {
					return fmt.Errorf("a list sentinel inside the list item %q: chartgen templates only whole items", s)
				}
				continue
			}
			if err := c.listStrings(x, put); err != nil {
				return err
			}
		}
	}
	return nil
}

var itemLine = regexp.MustCompile(`^( *)- `)

func indentOf(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

// rangeItems replaces each list item of text holding l's sentinel by a
// range over the value (see ListValue).
func (c Chart) rangeItems(text string, l ListValue) (string, error) {
	lines := strings.Split(text, "\n")
	local := []string{": " + l.Sentinel, ": {{ toJson $v }}", "- " + l.Sentinel, "- {{ toJson $v }}"}
	if l.Index != "" {
		local = append(local, l.Index+"0", l.Index+"{{ $i }}")
	}
	for _, p := range c.scalarExprs() {
		local = append(local, p[0], "{{ "+p[1]+" }}")
	}
	repl := strings.NewReplacer(local...)
	for {
		i := -1
		for j, line := range lines {
			if strings.Contains(line, l.Sentinel) {
				i = j
				break
			}
		}
		if i < 0 {
			return strings.Join(lines, "\n"), nil
		}
		if !strings.HasSuffix(lines[i], ": "+l.Sentinel) && !strings.HasSuffix(lines[i], "- "+l.Sentinel) {
			return "", fmt.Errorf("%s appears in %q, not as a whole list item or field", l.Sentinel, strings.TrimSpace(lines[i]))
		}
		start, end, err := itemBounds(lines, i)
		if err != nil {
			return "", fmt.Errorf("%s: %w", l.Sentinel, err)
		}
		d := indentOf(lines[start])
		pad := strings.Repeat(" ", d)
		item := make([]string, 0, end-start+2)
		item = append(item, fmt.Sprintf("%s{{- range $i, $v := %s }}", pad, l.expr()))
		for _, line := range lines[start:end] {
			item = append(item, repl.Replace(line))
		}
		item = append(item, pad+"{{- end }}")
		// The only item of its list: without elements the key goes too
		// (a list with a default is never empty).
		if alone := len(l.Default) == 0 && start > 0 && !itemLine.MatchString(lines[start-1]) && indentOf(lines[start-1]) == d &&
			strings.HasSuffix(lines[start-1], ":") && (end == len(lines) || indentOf(lines[end]) < d || !itemLine.MatchString(lines[end])); alone {
			start--
			item = append([]string{fmt.Sprintf("%s{{- if %s }}", pad, l.expr()), lines[start]}, item...)
			item = append(item, pad+"{{- end }}")
		}
		lines = append(lines[:start], append(item, lines[end:]...)...)
	}
}

// itemBounds returns the lines [start, end) of the list item holding line i.
func itemBounds(lines []string, i int) (start, end int, err error) {
	start = -1
	col := indentOf(lines[i])
	for j := i; j >= 0; j-- {
		d := indentOf(lines[j])
		if itemLine.MatchString(lines[j]) && (j == i || d < col) {
			start = j
			break
		}
		if d < col {
			col = d // a field of the item holding the sentinel's map
		}
	}
	if start < 0 {
		return 0, 0, fmt.Errorf("not inside a list item")
	}
	d := indentOf(lines[start])
	for end = start + 1; end < len(lines) && indentOf(lines[end]) > d && lines[end] != ""; end++ {
	}
	return start, end, nil
}

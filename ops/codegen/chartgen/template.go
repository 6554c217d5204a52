package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// podFields are the pod spec fields every workload takes from its
// component's values (.Values.<container name>.<field>), defaulting to what
// the manifest renders.
var podFields = []string{"tolerations", "nodeSelector", "affinity", "priorityClassName"}

// token is a placeholder put into an object before it is marshalled; the
// line holding it is then replaced by a Helm block.
type token struct {
	expr   string // the value, e.g. .Values.agent.tolerations
	scalar bool   // a scalar (toJson) rather than a block (toYaml)
	always bool   // emitted even when the value is empty
}

// tokenLine is a placeholder's line; the key may be the first of a list
// item's map (only a scalar token that is always emitted may be there).
var tokenLine = regexp.MustCompile(`(?m)^( *(?:- )?)([A-Za-z0-9_.-]+): zzhelmtok(\d+)$`)

// template turns one object of the sentinel render into template text,
// recording the defaults of its values (from dflt, the default render's
// object) when first is set.
func (c Chart) template(o, dflt Object, vals *values, first bool) (string, error) {
	o = deepCopy(o)
	addHelmLabels(o)
	var toks []token
	put := func(m map[string]any, field string, t token) {
		// A field the renderer writes (even empty) stays in the object
		// whatever the value; one it leaves out appears only when set.
		_, present := m[field]
		t.always = t.always || present
		m[field] = fmt.Sprintf("zzhelmtok%d", len(toks))
		toks = append(toks, t)
	}
	switch o["kind"] {
	case "Deployment", "DaemonSet", "StatefulSet":
		if _, err := c.workload(o, dflt, vals, first, put); err != nil {
			return "", err
		}
	}
	for _, ov := range c.Objects {
		if o["kind"] != ov.Kind {
			continue
		}
		parent, ok := dig(o, ov.Path[:len(ov.Path)-1])
		if !ok {
			return "", fmt.Errorf("no field %s", strings.Join(ov.Path, "."))
		}
		if first {
			d, _ := dig(dflt, ov.Path)
			vals.set(ov.Key, d, ov.Comment)
		}
		put(parent, ov.Path[len(ov.Path)-1], token{expr: ".Values." + ov.Key})
	}
	if err := c.listStrings(o, put); err != nil {
		return "", err
	}
	body, err := yaml.Marshal(o)
	if err != nil {
		return "", err
	}
	var lineErr error
	text := tokenLine.ReplaceAllStringFunc(string(body), func(line string) string {
		m := tokenLine.FindStringSubmatch(line)
		i, _ := strconv.Atoi(m[3])
		if strings.HasSuffix(m[1], "- ") && !(toks[i].scalar && toks[i].always) {
			lineErr = fmt.Errorf("the value %s is the first field of a list item: chartgen cannot guard it there", toks[i].expr)
		}
		return toks[i].lines(m[1], m[2])
	})
	if lineErr != nil {
		return "", lineErr
	}
	return c.substitute(text, vals, first)
}

// lines are the template lines that set key, indented by indent, from t.
func (t token) lines(indent, key string) string {
	switch {
	case t.scalar && t.always:
		return fmt.Sprintf("%s%s: {{ %s | toJson }}", indent, key, t.expr)
	case t.scalar:
		return fmt.Sprintf("%s{{- with %s }}\n%s%s: {{ toJson . }}\n%s{{- end }}", indent, t.expr, indent, key, indent)
	case t.always:
		return fmt.Sprintf("%s%s:\n%s  {{- toYaml %s | nindent %d }}", indent, key, indent, t.expr, len(indent)+2)
	default:
		return fmt.Sprintf("%s{{- with %s }}\n%s%s:\n%s  {{- toYaml . | nindent %d }}\n%s{{- end }}",
			indent, t.expr, indent, key, indent, len(indent)+2, indent)
	}
}

// substitute replaces the sentinel list items by ranges over their values
// and the sentinel strings by their expressions, and fails on a sentinel or
// placeholder left over.
func (c Chart) substitute(text string, vals *values, first bool) (string, error) {
	for _, l := range c.ListItems {
		var err error
		if text, err = c.rangeItems(text, l); err != nil {
			return "", err
		}
		if first {
			vals.set(l.Key, l.defaultValue(), l.Comment)
		}
	}
	repl := []string{sentinelNamespace, "{{ .Release.Namespace }}", sentinelImage, imageExpr,
		sentinelInstance, "{{ .Release.Name | quote }}", sentinelManagedBy, "{{ .Release.Service | quote }}",
		sentinelChart, `{{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}`}
	for _, s := range c.Strings {
		repl = append(repl, s.Sentinel, "{{ .Values."+s.Key+" }}")
		if first {
			vals.set(s.Key, s.Default, s.Comment)
		}
	}
	text = strings.NewReplacer(repl...).Replace(text)
	if i := strings.Index(text, sentinelMark); i >= 0 {
		return "", fmt.Errorf("a sentinel is left where chartgen has no value for it (the renderer transforms it, or the chart lacks the value): %q",
			text[max(0, i-80):min(len(text), i+80)])
	}
	if strings.Contains(text, "zzhelmtok") {
		return "", fmt.Errorf("a value placeholder was not replaced (marshalled onto a line of its own?)")
	}
	return text, nil
}

// workload replaces the pod spec's fields, the first container's resources,
// every container's imagePullPolicy and a Deployment's replicas by values
// of the component named after its first container.
func (c Chart) workload(o, dflt Object, vals *values, first bool, put func(map[string]any, string, token)) (string, error) {
	pod, ok := dig(o, []string{"spec", "template", "spec"})
	dpod, dok := dig(dflt, []string{"spec", "template", "spec"})
	if !ok || !dok {
		return "", fmt.Errorf("no pod template")
	}
	ctrs, _ := pod["containers"].([]any)
	dctrs, _ := dpod["containers"].([]any)
	if len(ctrs) == 0 || len(dctrs) != len(ctrs) {
		return "", fmt.Errorf("no containers, or not as many as in the default render")
	}
	c0 := ctrs[0].(map[string]any)
	comp := fmt.Sprint(c0["name"])
	pfx := ".Values." + comp + "."
	if first {
		if vals.workloads[comp] {
			return "", fmt.Errorf("two workloads whose first container is %q: values would collide", comp)
		}
		vals.workloads[comp] = true
	}
	record := func(field string, v any) {
		if first {
			vals.setIn(comp, field, v)
		}
	}
	for _, f := range podFields {
		if mentionsSentinel(pod[f]) {
			// e.g. the update operator's nodeSelector names the prefix:
			// it follows the value that replaces the sentinel, and is not
			// a value of its own.
			continue
		}
		if f == "priorityClassName" {
			record(f, orEmptyString(dpod[f]))
		} else {
			record(f, emptyOr(dpod[f], f == "tolerations"))
		}
		put(pod, f, token{expr: pfx + f, scalar: f == "priorityClassName"})
	}
	record("resources", emptyOr(dctrs[0].(map[string]any)["resources"], false))
	put(c0, "resources", token{expr: pfx + "resources"})
	for i, ci := range ctrs {
		cm := ci.(map[string]any)
		if p, ok := dctrs[i].(map[string]any)["imagePullPolicy"]; ok {
			if first {
				vals.setIn("image", "pullPolicy", p)
			}
			put(cm, "imagePullPolicy", token{expr: ".Values.image.pullPolicy", scalar: true})
		}
	}
	put(pod, "imagePullSecrets", token{expr: ".Values.imagePullSecrets"})
	if o["kind"] != "DaemonSet" {
		spec := o["spec"].(map[string]any)
		if r, ok := dig(dflt, []string{"spec"}); ok && r["replicas"] != nil {
			record("replicas", r["replicas"])
			put(spec, "replicas", token{expr: pfx + "replicas", scalar: true, always: true})
		}
	}
	return comp, nil
}

// emptyOr returns v, or an empty map (list) when the render has none.
func emptyOr(v any, list bool) any {
	if v != nil {
		return v
	}
	if list {
		return []any{}
	}
	return map[string]any{}
}

// mentionsSentinel tells whether v holds a sentinel anywhere.
func mentionsSentinel(v any) bool {
	b, err := yaml.Marshal(v)
	return err == nil && strings.Contains(string(b), sentinelMark)
}

func orEmptyString(v any) any {
	if v == nil {
		return ""
	}
	return v
}

// dig returns the map at path inside o.
func dig(o map[string]any, path []string) (map[string]any, bool) {
	cur := o
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return nil, false
		}
		cur = next
	}
	return cur, true
}

func deepCopy(o Object) Object {
	b, err := yaml.Marshal(o)
	if err != nil {
		panic(err)
	}
	var out Object
	if err := yaml.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// Sentinels of the labels Helm's conventions put on every object a chart
// installs (not on selectors or pod templates, which the manifest's
// objects keep as they are: a selector is immutable).
const (
	sentinelInstance  = "zzsentinstance"
	sentinelManagedBy = "zzsentmanagedby"
	sentinelChart     = "zzsentchart"
)

// HelmLabels are the labels the chart adds to every object's metadata
// beside the manifest's: the release (app.kubernetes.io/instance), Helm as
// manager and the chart and version (helm.sh/chart).
var HelmLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart"}

// addHelmLabels sets HelmLabels' sentinels on o's metadata.labels.
func addHelmLabels(o Object) {
	md, ok := o["metadata"].(map[string]any)
	if !ok {
		return
	}
	l, _ := md["labels"].(map[string]any)
	if l == nil {
		l = map[string]any{}
		md["labels"] = l
	}
	for i, v := range []string{sentinelInstance, sentinelManagedBy, sentinelChart} {
		l[HelmLabels[i]] = v
	}
}

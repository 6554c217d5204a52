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
	// merge: the value's entries are added to the map (or list) holding
	// the placeholder, which is not a field of its own.
	merge bool
	// fallback: the YAML the field holds while the value is empty (the
	// manifest's own).
	fallback string
}

// mergeKey is the placeholder key of a merge token in a map; a merge token
// in a list is a list item of its own.
const mergeKey = "zzhelmmerge"

// tokenItem is a merge token's line in a list.
var tokenItem = regexp.MustCompile(`(?m)^( *)- zzhelmtok(\d+)$`)

// tokenLine is a placeholder's line; the key may be the first of a list
// item's map (only a scalar token that is always emitted may be there).
var tokenLine = regexp.MustCompile(`(?m)^( *(?:- )?)([A-Za-z0-9_.-]+): zzhelmtok(\d+)$`)

// template turns one object of the sentinel render into template text,
// recording the defaults of its values (from dflt, the default render's
// object) when first is set.
func (c Chart) template(o, dflt Object, vals *values, first bool) (string, error) {
	o = deepCopy(o)
	addHelmLabels(o)
	c.serviceAccountNames(o, vals)
	var toks []token
	ph := func(t token) string {
		toks = append(toks, t)
		return fmt.Sprintf("zzhelmtok%d", len(toks)-1)
	}
	put := func(m map[string]any, field string, t token) {
		// A field the renderer writes (even empty) stays in the object
		// whatever the value; one it leaves out appears only when set.
		_, present := m[field]
		t.always = t.always || present
		m[field] = ph(t)
	}
	switch o["kind"] {
	case "Deployment", "DaemonSet", "StatefulSet":
		if _, err := c.workload(o, dflt, vals, first, put, ph); err != nil {
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
	text = tokenItem.ReplaceAllStringFunc(text, func(line string) string {
		m := tokenItem.FindStringSubmatch(line)
		i, _ := strconv.Atoi(m[2])
		return toks[i].lines(m[1], "")
	})
	text = vals.replaceServiceAccounts(text)
	text = guardKind(o, text)
	return c.substitute(text, vals, first)
}

// lines are the template lines that set key, indented by indent, from t.
func (t token) lines(indent, key string) string {
	switch {
	case t.fallback != "":
		pad := indent
		if strings.HasSuffix(pad, "- ") {
			pad = strings.TrimSuffix(pad, "- ") + "  "
		}
		var lit strings.Builder
		for _, l := range strings.Split(strings.TrimRight(t.fallback, "\n"), "\n") {
			lit.WriteString(pad + "  " + l + "\n")
		}
		return fmt.Sprintf("%s%s:\n%s  {{- if %s }}\n%s  {{- toYaml %s | nindent %d }}\n%s  {{- else }}\n%s%s  {{- end }}",
			indent, key, pad, t.expr, pad, t.expr, len(pad)+2, pad, lit.String(), pad)
	case t.merge:
		return fmt.Sprintf("%s{{- with %s }}\n%s{{- toYaml . | nindent %d }}\n%s{{- end }}", indent, t.expr, indent, len(indent), indent)
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
func (c Chart) workload(o, dflt Object, vals *values, first bool, put func(map[string]any, string, token), ph func(token) string) (string, error) {
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
	// The pod's and the first container's securityContext, named as
	// kured's and DataDog's charts name them. Empty (the default): the
	// manifest's own, which differs by variant (the update operator's
	// agent is privileged on one platform, super_t on another) and follows
	// the renderer; set: it replaces the manifest's whole.
	for _, sc := range []struct {
		m   map[string]any
		key string
	}{{pod, "podSecurityContext"}, {c0, "securityContext"}} {
		record(sc.key, map[string]any{})
		if sc.m["securityContext"] == nil { // none in the manifest: only the value's
			put(sc.m, "securityContext", token{expr: pfx + sc.key})
			continue
		}
		fallback, err := yaml.Marshal(sc.m["securityContext"])
		if err != nil || mentionsSentinel(sc.m["securityContext"]) {
			return "", fmt.Errorf("%s: securityContext: %v (a sentinel in it?)", comp, err)
		}
		put(sc.m, "securityContext", token{expr: pfx + sc.key, fallback: string(fallback)})
	}
	for i, ci := range ctrs {
		cm := ci.(map[string]any)
		p, ok := dctrs[i].(map[string]any)["imagePullPolicy"]
		if first && (ok || !vals.hasIn("image", "pullPolicy")) {
			// A renderer that sets none leaves it to the kubelet: the
			// value's default is empty, and the field appears once set.
			vals.setIn("image", "pullPolicy", orEmptyString(p))
		}
		put(cm, "imagePullPolicy", token{expr: ".Values.image.pullPolicy", scalar: true})
	}
	// The component's pod annotations, labels and environment, added to
	// what the manifest renders.
	record("podAnnotations", map[string]any{})
	record("podLabels", map[string]any{})
	record("extraEnv", []any{})
	tmeta, _ := dig(o, []string{"spec", "template", "metadata"})
	if tmeta == nil {
		return "", fmt.Errorf("no pod template metadata")
	}
	if l, ok := tmeta["labels"].(map[string]any); ok {
		put(l, mergeKey, token{expr: pfx + "podLabels", merge: true})
	} else {
		put(tmeta, "labels", token{expr: pfx + "podLabels"})
	}
	if a, ok := tmeta["annotations"].(map[string]any); ok {
		put(a, mergeKey, token{expr: pfx + "podAnnotations", merge: true})
	} else {
		put(tmeta, "annotations", token{expr: pfx + "podAnnotations"})
	}
	if env, ok := c0["env"].([]any); ok {
		c0["env"] = append(env, ph(token{expr: pfx + "extraEnv", merge: true}))
	} else {
		put(c0, "env", token{expr: pfx + "extraEnv"})
	}
	if sa, _ := pod["serviceAccountName"].(string); sa != "" {
		record("serviceAccount", map[string]any{"create": true, "name": ""})
	}
	if o["kind"] == "DaemonSet" {
		spec := o["spec"].(map[string]any)
		d, _ := dig(dflt, []string{"spec"})
		record("updateStrategy", emptyOr(d["updateStrategy"], false))
		put(spec, "updateStrategy", token{expr: pfx + "updateStrategy", always: true})
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

// rbacKinds are the objects rbac.create=false leaves out (the cluster's
// administrator grants the same rules by other means).
var rbacKinds = map[string]bool{"Role": true, "ClusterRole": true, "RoleBinding": true, "ClusterRoleBinding": true}

// guardKind wraps the template of an RBAC object in `if .Values.rbac.create`
// and that of a workload's ServiceAccount in `if .Values.<component>.serviceAccount.create`.
func guardKind(o Object, text string) string {
	cond := ""
	switch {
	case rbacKinds[fmt.Sprint(o["kind"])]:
		cond = ".Values.rbac.create"
	case o["kind"] == "ServiceAccount":
		md, _ := o["metadata"].(map[string]any)
		if comp, ok := saComponent(fmt.Sprint(md["name"])); ok {
			cond = ".Values." + comp + ".serviceAccount.create"
		}
	}
	if cond == "" {
		return text
	}
	return "{{- if " + cond + " }}\n" + strings.TrimSuffix(text, "\n") + "\n{{- end }}\n"
}

// saSentinel marks a workload's ServiceAccount name in an object until
// replaceServiceAccounts puts the value's expression there.
const saSentinel = "zzsentsa-"

// saComponent reads the component out of a name serviceAccountNames set.
func saComponent(name string) (string, bool) {
	comp, ok := strings.CutPrefix(name, saSentinel)
	if !ok {
		return "", false
	}
	comp, _, _ = strings.Cut(comp, "-zz-")
	return comp, true
}

// serviceAccountNames scans the chart's workloads for their ServiceAccounts
// (once per values) and marks each place o names one: the ServiceAccount's
// name, a pod's serviceAccountName, a binding's subject and the
// system:serviceaccount user an admission policy matches.
func (c Chart) serviceAccountNames(o Object, vals *values) {
	if len(vals.serviceAccounts) == 0 {
		return
	}
	mark := func(name string) (string, bool) {
		comp, ok := vals.serviceAccounts[name]
		if !ok {
			return "", false
		}
		return saSentinel + comp + "-zz-" + name, true
	}
	md, _ := o["metadata"].(map[string]any)
	if o["kind"] == "ServiceAccount" {
		if m, ok := mark(fmt.Sprint(md["name"])); ok {
			md["name"] = m
		}
	}
	if pod, ok := dig(o, []string{"spec", "template", "spec"}); ok {
		if m, ok := mark(fmt.Sprint(pod["serviceAccountName"])); ok {
			pod["serviceAccountName"] = m
		}
	}
	if subs, ok := o["subjects"].([]any); ok {
		for _, s := range subs {
			sm, _ := s.(map[string]any)
			if sm["kind"] != "ServiceAccount" {
				continue
			}
			if m, ok := mark(fmt.Sprint(sm["name"])); ok {
				sm["name"] = m
			}
		}
	}
	if o["kind"] == "ValidatingAdmissionPolicy" {
		b, _ := yaml.Marshal(o)
		text := string(b)
		for name := range vals.serviceAccounts {
			m, _ := mark(name)
			text = regexp.MustCompile(`(system:serviceaccount:`+sentinelNamespace+`:)`+regexp.QuoteMeta(name)+`\b([^-]|$)`).
				ReplaceAllString(text, "${1}"+m+"${2}")
		}
		var out Object
		if err := yaml.Unmarshal([]byte(text), &out); err == nil {
			for k := range o {
				delete(o, k)
			}
			for k, v := range out {
				o[k] = v
			}
		}
	}
}

// replaceServiceAccounts puts each marked ServiceAccount name's expression:
// the component's serviceAccount.name, defaulting to the manifest's name.
func (v *values) replaceServiceAccounts(text string) string {
	for name, comp := range v.serviceAccounts {
		text = strings.ReplaceAll(text, saSentinel+comp+"-zz-"+name,
			fmt.Sprintf("{{ .Values.%s.serviceAccount.name | default %q }}", comp, name))
	}
	return text
}

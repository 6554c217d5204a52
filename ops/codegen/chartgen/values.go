package main

import (
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// values are a chart's values.yaml: top-level keys in the order first set,
// each with a comment.
type values struct {
	order    []string
	comments map[string]string
	m        map[string]any
	// workloads are the components already seen.
	workloads map[string]bool
}

func newValues() *values {
	v := &values{comments: map[string]string{}, m: map[string]any{}, workloads: map[string]bool{}}
	v.set("image", map[string]any{"repository": imageRepo, "tag": ""},
		"The image every component runs; tag empty: the chart's appVersion.")
	v.set("imagePullSecrets", []any{}, "Secrets to pull the image with (the pods' imagePullSecrets).")
	return v
}

func (v *values) has(key string) bool { _, ok := v.m[key]; return ok }

// set sets a top-level key, or a dotted one (component.field) inside a map.
func (v *values) set(key string, val any, comment string) {
	if top, field, dotted := strings.Cut(key, "."); dotted {
		v.setIn(top, field, val)
		return
	}
	if !v.has(key) {
		v.order = append(v.order, key)
	}
	v.m[key] = val
	if comment != "" {
		v.comments[key] = comment
	}
}

func (v *values) setIn(top, field string, val any) {
	m, ok := v.m[top].(map[string]any)
	if !ok {
		m = map[string]any{}
		v.set(top, m, "")
	}
	m[field] = val
}

// addValues adds the variant's default and the components' comments.
func (c Chart) addValues(v *values, _ []Object) error {
	if c.Variant != nil {
		var d any = c.Variant.Values[0]
		if c.Variant.Bool {
			d = d == "true"
		}
		v.set(c.Variant.Key, d, c.Variant.Comment)
	}
	for _, t := range c.Toggles {
		v.set(t.Key, false, t.Comment)
	}
	for _, k := range v.order {
		if _, ok := v.comments[k]; ok {
			continue
		}
		if m, ok := v.m[k].(map[string]any); ok && m["resources"] != nil {
			v.comments[k] = fmt.Sprintf("The %s's pods: %s (defaults: what the manifest renders).", k, strings.Join(componentFields(m), ", "))
		}
	}
	return nil
}

func componentFields(m map[string]any) []string { return sortedKeys(m) }

// render writes values.yaml.
func (v *values) render(c Chart) []byte {
	var b strings.Builder
	b.WriteString(GeneratedHeader + "\n")
	ns := "helm install --namespace " + c.DefaultNamespace + " --create-namespace"
	if c.NeedsPrivileged {
		ns = "create it and label it pod-security.kubernetes.io/enforce=privileged, then\n# helm install --namespace " + c.DefaultNamespace
	}
	fmt.Fprintf(&b, "# Values of the %s chart. With the defaults the chart installs the objects of\n# the manifest command named in Chart.yaml's description (without its Namespace:\n# %s). docs/install.md lists them.\n", c.Name, ns)
	for _, k := range v.order {
		body, err := yaml.Marshal(map[string]any{k: v.m[k]})
		if err != nil {
			panic(err)
		}
		b.WriteString("\n")
		for _, line := range strings.Split(v.comments[k], "\n") {
			if line != "" {
				b.WriteString("# " + line + "\n")
			}
		}
		b.Write(body)
	}
	return []byte(b.String())
}

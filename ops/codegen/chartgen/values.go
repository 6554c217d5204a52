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
	// serviceAccounts are the workloads' ServiceAccount names and their
	// components.
	serviceAccounts map[string]string
}

func newValues() *values {
	v := &values{comments: map[string]string{}, m: map[string]any{}, workloads: map[string]bool{}, serviceAccounts: map[string]string{}}
	v.set("image", map[string]any{"repository": imageRepo, "tag": ""},
		"The image every component runs; tag empty: the chart's appVersion. pullPolicy: the containers'\n"+
			"imagePullPolicy (empty: the kubelet's default, IfNotPresent for a tagged image).")
	v.set("imagePullSecrets", []any{}, "Secrets to pull the image with (the pods' imagePullSecrets).")
	return v
}

func (v *values) has(key string) bool { _, ok := v.m[key]; return ok }

func (v *values) hasIn(top, field string) bool {
	m, _ := v.m[top].(map[string]any)
	_, ok := m[field]
	return ok
}

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
			v.comments[k] = fmt.Sprintf("The %s's pods: %s (defaults: what the manifest renders).\n"+
				"podAnnotations, podLabels and extraEnv (the first container's env) add to the manifest's;\n"+
				"podSecurityContext (the pod's) and securityContext (the first container's), empty: the manifest's, set: replace it whole;\n"+
				"serviceAccount.create=false: the chart creates no ServiceAccount and the pods run as serviceAccount.name\n"+
				"(empty: the manifest's name), which the bindings and admission policies then name.", k, strings.Join(componentFields(m), ", "))
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

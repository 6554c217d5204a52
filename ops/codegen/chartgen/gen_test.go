package main

import (
	"strings"
	"testing"
)

// fakeChart renders body with {{NS}}, {{IMAGE}} and {{MODE}} replaced by the
// sentinels (or defaults) and the variant.
func fakeChart(body string) Chart {
	return Chart{Name: "fake", DefaultNamespace: "fake-system",
		Render: func(r Render) ([]byte, error) {
			ns, img := "fake-system", "docker.io/slipway/slipway:v0.0.0-dev"
			if r.Sentinel {
				ns, img = sentinelNamespace, sentinelImage
			}
			return []byte(strings.NewReplacer("{{NS}}", ns, "{{IMAGE}}", img, "{{MODE}}", variantOr(r, "a")).Replace(body)), nil
		},
		Variant: &Variant{Key: "mode", Values: []string{"a", "b"}}}
}

const fakeDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: ctl, namespace: {{NS}}}
spec:
  replicas: 2
  selector: {matchLabels: {app: ctl}}
  template:
    metadata: {labels: {app: ctl}}
    spec:
      containers:
      - name: controller
        image: {{IMAGE}}
        args: [--mode={{MODE}}, --lease-namespace={{NS}}]
        ports: [{name: metrics, containerPort: 9480}]
        livenessProbe: {httpGet: {path: /healthz, port: 9480}}
`

// TestBuildFollowsTheRenderer: chartgen templates whatever a renderer emits
// (a new Deployment with probes, an object only one variant has) and refuses
// what it cannot template faithfully.
func TestBuildFollowsTheRenderer(t *testing.T) {
	Dashboards["fake"] = []Panel{{Title: "t", Targets: []Target{{"up", ""}}}}
	defer delete(Dashboards, "fake")
	files, err := Build(fakeChart(fakeDeployment + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: only-{{MODE}}, namespace: {{NS}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	dep := string(files["templates/deployment-ctl.yaml"])
	for _, want := range []string{`has (toString .Values.mode) (list "a")`, "--mode=a", "--mode=b", "--lease-namespace={{ .Release.Namespace }}",
		"image: " + imageExpr, "livenessProbe:", "replicas: {{ .Values.controller.replicas | toJson }}"} {
		if !strings.Contains(dep, want) {
			t.Errorf("the Deployment's template lacks %q:\n%s", want, dep)
		}
	}
	if _, ok := files["templates/configmap-only-b.yaml"]; !ok {
		t.Errorf("no template for the object only variant b renders: %v", sortedKeys(files))
	}
	if !strings.Contains(string(files["values.yaml"]), "replicas: 2") {
		t.Errorf("values.yaml lacks the rendered replicas:\n%s", files["values.yaml"])
	}
	// A renderer that transforms a setting (upper case, a hash) is caught
	// by TestChartsRenderTheManifests' comparison with default values.
	for name, body := range map[string]string{
		"two workloads with the same first container": fakeDeployment + "---\n" + strings.Replace(fakeDeployment, "name: ctl", "name: ctl2", 1),
		"a CRD that depends on a value":               fakeDeployment + "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x.example.com, annotations: {ns: \"{{NS}}\"}}\n",
		"no workload serving metrics":                 strings.Replace(fakeDeployment, "name: metrics", "name: grpc", 1),
	} {
		if _, err := Build(fakeChart(body)); err == nil {
			t.Errorf("%s: Build accepted it", name)
		}
	}
}

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"slipway.dev/slipway/ops/testenv"
)

// chartsDir is the checkout's charts/ (go test runs in ops/codegen/chartgen).
const chartsDir = "../../../charts"

var env *testenv.Env

func TestMain(m *testing.M) {
	crds, err := monitoringCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testenv.RunMain(m, testenv.Options{Cluster: true, Nodes: 2, CRDs: crds}, &env)
	if slipwayPath != "" { // slipwayBinary's build
		os.RemoveAll(filepath.Dir(slipwayPath))
	}
	os.Exit(code)
}

// monitoringCRDs are the Prometheus operator's ServiceMonitor and
// PrometheusRule CRDs (testdata/): the API server validates the charts'
// monitoring objects against their schemas.
func monitoringCRDs() ([]*apiextv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob("testdata/monitoring.coreos.com_*.yaml")
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no monitoring CRDs in testdata/: %v", err)
	}
	var out []*apiextv1.CustomResourceDefinition
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crd := &apiextv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(b, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// helmBin is the pinned helm that scripts/install-tools links into the
// tools directory: a missing helm fails the test, it never skips it.
func helmBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: helm and promtool are built tools")
	}
	dir := os.Getenv(testenv.EnvToolsDir)
	if dir == "" {
		out, err := exec.Command("../../../scripts/install-tools").Output()
		if err != nil {
			t.Fatalf("scripts/install-tools: %v", err)
		}
		fields := strings.Fields(string(out))
		dir = fields[len(fields)-1]
	}
	p := filepath.Join(dir, "helm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no helm in %s (run scripts/install-tools): %v", dir, err)
	}
	return p
}

func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// TestChartsAreUpToDate: the committed charts are what chartgen writes now
// (scripts/generate --check says the same in CI).
func TestChartsAreUpToDate(t *testing.T) {
	for _, c := range Charts() {
		files, err := Build(c)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		for rel, want := range files {
			got, err := os.ReadFile(filepath.Join(chartsDir, c.Name, rel))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("charts/%s/%s is out of date: run scripts/generate", c.Name, rel)
			}
		}
	}
}

// TestChartsRenderTheManifests compares `helm template` with the manifest
// renderer, object by object: with the default values against the default
// manifest (each value of a chart's switch), and with the values that
// reproduce the sentinels against the sentinel render (so every value reaches
// every place the renderer puts its setting).
func TestChartsRenderTheManifests(t *testing.T) {
	for _, c := range Charts() {
		variants := []string{""}
		if c.Variant != nil {
			variants = c.Variant.Values
		}
		for _, v := range variants {
			for _, on := range toggleSets(c) {
				for _, sentinel := range []bool{false, true} {
					args := []string{"template", "rel", filepath.Join(chartsDir, c.Name), "--include-crds", "--namespace", c.DefaultNamespace}
					if v != "" {
						args = append(args, "--set", c.Variant.Key+"="+v)
					}
					for _, k := range on {
						args = append(args, "--set", k+"=true")
					}
					if sentinel {
						args = append(args, sentinelArgs(c)...)
					}
					got, err := ParseDocs(helm(t, args...))
					if err != nil {
						t.Fatal(err)
					}
					body, err := c.Render(Render{Sentinel: sentinel, Variant: v, On: on})
					if err != nil {
						t.Fatal(err)
					}
					want, err := ParseDocs(body)
					if err != nil {
						t.Fatal(err)
					}
					compareObjects(t, c.Name+" "+strings.Join(args[6:], " "), got, want)
				}
			}
		}
	}
}

// toggleSets are the chart's toggles to set: none, each alone, and all.
func toggleSets(c Chart) [][]string {
	sets := [][]string{nil}
	var all []string
	for _, tg := range c.Toggles {
		sets = append(sets, []string{tg.Key})
		all = append(all, tg.Key)
	}
	if len(all) > 1 {
		sets = append(sets, all)
	}
	return sets
}

// sentinelArgs are the helm flags whose values reproduce the sentinel render.
func sentinelArgs(c Chart) []string {
	repo, tag, _ := strings.Cut(sentinelImage, ":")
	args := []string{"--namespace", sentinelNamespace, "--set", "image.repository=" + repo, "--set", "image.tag=" + tag}
	for _, s := range c.Strings {
		args = append(args, "--set", s.Key+"="+s.Sentinel)
	}
	for _, l := range c.ListItems {
		args = append(args, "--set-json", l.Key+`=["`+l.Sentinel+`"]`)
	}
	if c.Name == "slipway-agent" {
		args = append(args, "--set", "channel.url="+sentinelChannelURL)
	}
	return args
}

// compareObjects reports each object (by kind, namespace and name) that is
// in one list and not the other or differs; the manifest's Namespace is the
// one object the chart leaves to `helm install --create-namespace`.
func compareObjects(t *testing.T, what string, chart, manifest []Object) {
	t.Helper()
	byKey := func(objs []Object) map[string]Object {
		m := map[string]Object{}
		for _, o := range objs {
			if o["kind"] != "Namespace" {
				m[Key(o)] = o
			}
		}
		return m
	}
	// The chart's own labels (Helm's conventions) are checked, then left
	// out of the comparison with the manifest.
	for _, o := range chart {
		if o["kind"] == "CustomResourceDefinition" {
			continue
		}
		md, _ := o["metadata"].(map[string]any)
		l, _ := md["labels"].(map[string]any)
		if l["app.kubernetes.io/instance"] != "rel" || l["app.kubernetes.io/managed-by"] != "Helm" || !strings.HasPrefix(fmt.Sprint(l["helm.sh/chart"]), "slipway-") {
			t.Errorf("%s: %s lacks Helm's labels: %v", what, Key(o), l)
			continue
		}
		for _, k := range HelmLabels {
			delete(l, k)
		}
		if len(l) == 0 {
			delete(md, "labels")
		}
	}
	got, want := byKey(chart), byKey(manifest)
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: the chart lacks %s", what, k)
		case !reflect.DeepEqual(g, w):
			gy, _ := yaml.Marshal(g)
			wy, _ := yaml.Marshal(w)
			t.Errorf("%s: %s differs\n--- chart:\n%s\n--- manifest:\n%s", what, k, gy, wy)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: the chart has %s, which the manifest has not", what, k)
		}
	}
	if len(want) == 0 {
		t.Errorf("%s: the manifest rendered no object", what)
	}
}

// TestHelmLint runs `helm lint --strict` on every chart.
func TestHelmLint(t *testing.T) {
	for _, c := range Charts() {
		helm(t, "lint", "--strict", filepath.Join(chartsDir, c.Name))
	}
}

// TestReleaseChartsAreReproducible runs scripts/release-charts twice for
// one version: the packaged charts carry the release's version and
// appVersion (`helm package --version --app-version`), and the two runs
// give the same bytes (the archives are repacked with the source's date).
func TestReleaseChartsAreReproducible(t *testing.T) {
	helmBin(t) // the script uses the pinned helm
	var outs [2]string
	for i := range outs {
		outs[i] = t.TempDir()
		cmd := exec.Command("../../../scripts/release-charts")
		cmd.Env = append(os.Environ(), "VERSION=v1.2.3", "OUT="+outs[i], "SOURCE_DATE_EPOCH=1700000000")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scripts/release-charts: %v\n%s", err, out)
		}
	}
	for _, c := range Charts() {
		name := c.Name + "-1.2.3.tgz"
		a, err := os.ReadFile(filepath.Join(outs[0], name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(outs[1], name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two releases of one commit", name)
		}
		meta := string(helm(t, "show", "chart", filepath.Join(outs[0], name)))
		if !strings.Contains(meta, "\nversion: 1.2.3\n") || !strings.Contains(meta, "appVersion: v1.2.3\n") {
			t.Errorf("%s: Chart.yaml\n%s", name, meta)
		}
	}
}

// TestValuesSchemaRefusesWrongTypes: each chart's values.schema.json makes
// helm refuse a value of the wrong type, a switch outside its values and a
// misspelt top-level key, with the value's path in the error.
func TestValuesSchemaRefusesWrongTypes(t *testing.T) {
	for _, tc := range []struct {
		chart string
		set   []string
		want  string
	}{
		{"slipway-swarm", []string{"--set", "controller.replicas=two"}, "/controller/replicas"},
		{"slipway-agent", []string{"--set", "installCRDs=maybe"}, "/installCRDs"},
		{"slipway-update-operator", []string{"--set", "platform=windows"}, "/platform"},
		{"slipway-eds", []string{"--set", "imagePullSecret=x"}, "imagePullSecret"},
		{"slipway-eds", []string{"--set", "metrics.serviceMonitor.enabled=yes"}, "/metrics/serviceMonitor/enabled"},
		{"slipway-eds", []string{"--set", "controller.serviceAccount.create=maybe"}, "/controller/serviceAccount/create"},
		{"slipway-swarm", []string{"--set", "rbac.create=no"}, "/rbac/create"},
		{"slipway-agent", []string{"--set", "agent.extraEnv=x"}, "/agent/extraEnv"},
	} {
		cmd := exec.Command(helmBin(t), append([]string{"template", "rel", filepath.Join(chartsDir, tc.chart)}, tc.set...)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "schema") || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s %v: want a schema error naming %s, got %v\n%s", tc.chart, tc.set, tc.want, err, out)
		}
	}
	// The types the defaults have are taken.
	helm(t, "template", "rel", filepath.Join(chartsDir, "slipway-swarm"), "--set", "controller.replicas=3", "--set", "image.tag=v1.2.3")
}

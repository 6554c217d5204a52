package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type node struct {
	dir  string
	opts Options
}

func newNode(t *testing.T) *node {
	dir := t.TempDir()
	return &node{dir: dir, opts: Options{
		Sources:      sources(dir),
		ManifestsDir: filepath.Join(dir, "k3s", "server", "manifests"),
		K3sConfigDir: filepath.Join(dir, "etc", "k3s", "config.yaml.d"),
		Image:        "registry.example/slipway:v7",
	}}
}

func (n *node) manifest() string { return filepath.Join(n.opts.ManifestsDir, ManifestFile) }
func (n *node) labels() string   { return filepath.Join(n.opts.K3sConfigDir, K3sConfigFile) }

func (n *node) config(t *testing.T, body string) {
	t.Helper()
	writeFiles(t, n.dir, map[string]string{"k3os/config.yaml": body})
}

func (n *node) apply(t *testing.T) *Result {
	t.Helper()
	res, err := Apply(t.Context(), n.opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

func TestApplyEnablesThenDisables(t *testing.T) {
	n := newNode(t)
	n.config(t, `
slipway:
  operator: {enabled: true, url: "file:///mirror", version: v2, concurrency: 2, window: {start: "01:00", end: "03:00"}}
  labels: {slipway.dev/channel: stable}
`)
	res := n.apply(t)
	if len(res.Written) != 2 {
		t.Fatalf("written = %v, want the manifest and the labels", res.Written)
	}
	got := read(t, n.manifest())
	for _, s := range []string{"url: file:///mirror", "version: v2", "concurrency: 2", "start: \"01:00\"", "image: registry.example/slipway:v7"} {
		if !strings.Contains(got, s) {
			t.Errorf("manifest lacks %q", s)
		}
	}
	if l := read(t, n.labels()); !strings.Contains(l, "node-label+:\n- slipway.dev/channel=stable\n") {
		t.Errorf("labels drop-in = %q", l)
	}

	n.config(t, "slipway: {operator: {enabled: false}}\n")
	res = n.apply(t)
	if len(res.Removed) != 2 || exists(n.manifest()) || exists(n.labels()) {
		t.Fatalf("disabled: removed %v; manifest left %v, labels left %v", res.Removed, exists(n.manifest()), exists(n.labels()))
	}
	if res := n.apply(t); len(res.Removed)+len(res.Written) != 0 {
		t.Errorf("second disabled apply did something: %+v", res)
	}
}

func TestApplyIsIdempotent(t *testing.T) {
	n := newNode(t)
	n.config(t, "slipway: {operator: {enabled: true, version: latest}}\n")
	n.apply(t)
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(n.manifest(), old, old); err != nil {
		t.Fatal(err)
	}
	res := n.apply(t)
	if len(res.Written) != 0 || len(res.Unchanged) != 1 {
		t.Fatalf("second apply: %+v, want the manifest unchanged", res)
	}
	st, err := os.Stat(n.manifest())
	if err != nil {
		t.Fatal(err)
	}
	if !st.ModTime().Equal(old) {
		t.Error("an unchanged manifest was rewritten (k3s would redeploy it)")
	}
	leftovers, _ := filepath.Glob(filepath.Join(n.opts.ManifestsDir, ".*.tmp"))
	if len(leftovers) != 0 {
		t.Errorf("temp files left: %v", leftovers)
	}
}

func TestInvalidConfigChangesNothing(t *testing.T) {
	n := newNode(t)
	n.config(t, "slipway: {operator: {enabled: true, version: v1}, labels: {a: b}}\n")
	n.apply(t)
	before, beforeLabels := read(t, n.manifest()), read(t, n.labels())

	writeFiles(t, n.dir, map[string]string{"k3os/config.d/90-typo.yaml": "slipway: {operator: {enabled: false, concurency: 3}}\n"})
	_, err := Apply(t.Context(), n.opts)
	if err == nil || !strings.Contains(err.Error(), "slipway.operator.concurency") || !strings.Contains(err.Error(), "nothing changed") {
		t.Fatalf("err = %v, want the bad key named", err)
	}
	if read(t, n.manifest()) != before || read(t, n.labels()) != beforeLabels {
		t.Error("an invalid config changed the files")
	}
}

func TestShow(t *testing.T) {
	n := newNode(t)
	writeFiles(t, n.dir, map[string]string{
		"system/config.yaml":      "hostname: a\nslipway: {operator: {url: 'file:///m'}}\n",
		"k3os/config.d/10-x.yaml": "slipway: {operator: {enabled: true}}\n",
	})
	var y, j bytes.Buffer
	if err := Show(ShowOptions{Sources: n.opts.Sources, Out: &y}); err != nil {
		t.Fatal(err)
	}
	if want := "hostname: a\nslipway:\n  operator:\n    enabled: true\n    url: file:///m\n"; y.String() != want {
		t.Errorf("yaml = %q\nwant %q", y.String(), want)
	}
	if err := Show(ShowOptions{Sources: n.opts.Sources, JSON: true, Out: &j}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(j.String(), `"enabled": true`) {
		t.Errorf("json = %s", j.String())
	}
	writeFiles(t, n.dir, map[string]string{"k3os/config.d/20-bad.yaml": "slipway: {bogus: 1}\n"})
	if err := Show(ShowOptions{Sources: n.opts.Sources, Out: &y}); err == nil || !strings.Contains(err.Error(), "slipway.bogus") {
		t.Errorf("err = %v", err)
	}
}

package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestMerge(t *testing.T) {
	cases := []struct {
		name             string
		base, over, want map[string]any
	}{
		{"empty", map[string]any{}, map[string]any{}, map[string]any{}},
		{"new key", map[string]any{"a": 1}, map[string]any{"b": 2}, map[string]any{"a": 1, "b": 2}},
		{"scalar replaced", map[string]any{"a": 1}, map[string]any{"a": 2}, map[string]any{"a": 2}},
		{"maps merge deeply",
			map[string]any{"s": map[string]any{"o": map[string]any{"enabled": true, "url": "x"}}},
			map[string]any{"s": map[string]any{"o": map[string]any{"url": "y"}}},
			map[string]any{"s": map[string]any{"o": map[string]any{"enabled": true, "url": "y"}}}},
		{"lists replaced, not appended",
			map[string]any{"days": []any{"mon", "tue"}}, map[string]any{"days": []any{"sat"}},
			map[string]any{"days": []any{"sat"}}},
		{"a scalar replaces a map", map[string]any{"a": map[string]any{"b": 1}}, map[string]any{"a": "off"}, map[string]any{"a": "off"}},
		{"null replaces", map[string]any{"a": map[string]any{"b": 1}}, map[string]any{"a": nil}, map[string]any{"a": nil}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Merge(c.base, c.over); !reflect.DeepEqual(got, c.want) {
				t.Errorf("Merge = %v, want %v", got, c.want)
			}
		})
	}
}

func TestMergeLeavesItsArgumentsAlone(t *testing.T) {
	base := map[string]any{"s": map[string]any{"a": 1}}
	Merge(base, map[string]any{"s": map[string]any{"a": 2}})
	if base["s"].(map[string]any)["a"] != 1 {
		t.Error("Merge modified base")
	}
}

// writeFiles creates files (relative path -> content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func sources(dir string) Sources {
	return Sources{
		SystemDir:   filepath.Join(dir, "system"),
		LocalConfig: filepath.Join(dir, "k3os", "config.yaml"),
		ConfigDir:   filepath.Join(dir, "k3os", "config.d"),
	}
}

func TestLoadMergesInK3osOrder(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"system/config.yaml":      "hostname: image\nslipway:\n  operator:\n    url: file:///a\n    version: v1\n",
		"k3os/config.yaml":        "hostname: node\nslipway:\n  operator:\n    version: v2\n",
		"k3os/config.d/20-b.yaml": "slipway:\n  operator:\n    concurrency: 3\n",
		"k3os/config.d/10-a.yaml": "slipway:\n  operator:\n    concurrency: 2\n    enabled: true\n",
		"k3os/config.d/notes.txt": "ignored: true\n",
	})
	doc, files, err := Load(sources(dir))
	if err != nil {
		t.Fatal(err)
	}
	var rel []string
	for _, f := range files {
		r, _ := filepath.Rel(dir, f)
		rel = append(rel, r)
	}
	if got := strings.Join(rel, ","); got != "system/config.yaml,k3os/config.yaml,k3os/config.d/10-a.yaml,k3os/config.d/20-b.yaml" {
		t.Errorf("files = %s", got)
	}
	s, err := ParseSection(doc)
	if err != nil {
		t.Fatal(err)
	}
	op := s.Operator
	if !op.Enabled || op.URL != "file:///a" || op.Version != "v2" || op.Concurrency == nil || *op.Concurrency != 3 {
		t.Errorf("operator = %+v", op)
	}
	if doc["hostname"] != "node" {
		t.Errorf("hostname = %v, want the local config's", doc["hostname"])
	}
}

func TestLoadWithoutFilesIsEmpty(t *testing.T) {
	doc, files, err := Load(sources(t.TempDir()))
	if err != nil || len(doc) != 0 || len(files) != 0 {
		t.Fatalf("doc %v files %v err %v", doc, files, err)
	}
}

func TestLoadNamesTheBrokenFile(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"k3os/config.d/30-bad.yaml": "slipway: [unclosed\n"})
	_, _, err := Load(sources(dir))
	if err == nil || !strings.Contains(err.Error(), "30-bad.yaml") {
		t.Fatalf("err = %v, want one naming 30-bad.yaml", err)
	}
}

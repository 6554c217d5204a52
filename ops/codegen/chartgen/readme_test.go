package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestChartReadmeListsEveryValue: each chart's committed README.md has a
// row for every leaf of its values.yaml's setting groups (and every other
// top-level value) with the default values.yaml has, so the README says
// what the chart takes as helm-docs would.
func TestChartReadmeListsEveryValue(t *testing.T) {
	for _, c := range Charts() {
		dir := filepath.Join(chartsDir, c.Name)
		readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		body, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var vals map[string]any
		if err := yaml.Unmarshal(body, &vals); err != nil {
			t.Fatal(err)
		}
		var check func(path string, v any)
		check = func(path string, v any) {
			key := path[strings.LastIndex(path, ".")+1:]
			if m, ok := v.(map[string]any); ok && len(m) > 0 && (settingGroups[key] || key == "serviceAccount" || key == "rbac") {
				for k, x := range m {
					check(path+"."+k, x)
				}
				return
			}
			d, _ := json.Marshal(v)
			row := "| `" + path + "` | "
			i := strings.Index(string(readme), row)
			if i < 0 {
				t.Errorf("%s: README.md has no row for %s", c.Name, path)
				return
			}
			line := string(readme[i:])
			line = line[:strings.Index(line, "\n")]
			if !strings.Contains(line, "`"+strings.ReplaceAll(string(d), "|", `\|`)+"`") {
				t.Errorf("%s: README.md's %s row %q lacks the default %s", c.Name, path, line, d)
			}
			if strings.HasSuffix(line, "|  |") {
				t.Errorf("%s: README.md's %s row has no description", c.Name, path)
			}
		}
		for k, v := range vals {
			check(k, v)
		}
	}
}

package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// goSources returns the text of the non-test Go files under dirs (relative
// to the repository root), generated code left out.
func goSources(t *testing.T, dirs ...string) string {
	t.Helper()
	var b strings.Builder
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join("..", dir), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "generated" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.Write(src)
			b.WriteByte('\n')
			return nil
		})
		if err != nil {
			t.Fatalf("read %s: %v", dir, err)
		}
	}
	return b.String()
}

// docTables returns every Markdown table row of docs/**.md, by file.
func docTables(t *testing.T) map[string][]string {
	t.Helper()
	rows := map[string][]string{}
	for _, f := range markdownFiles(t, "..") {
		if !strings.HasPrefix(f, "docs"+string(filepath.Separator)) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "| `") {
				rows[f] = append(rows[f], line)
			}
		}
	}
	return rows
}

// tableFlag is a flag named in a table's first cell: | `--name` ... |.
var tableFlag = regexp.MustCompile("^\\| `--([a-z0-9-]+)`")

// TestDocumentedFlagsExist fails when a table of docs/ lists a flag that no
// command of cmd/slipway defines (a flag renamed or removed since).
func TestDocumentedFlagsExist(t *testing.T) {
	src := goSources(t, "cmd/slipway")
	n := 0
	for file, rows := range docTables(t) {
		for _, row := range rows {
			m := tableFlag.FindStringSubmatch(row)
			if m == nil {
				continue
			}
			n++
			if !strings.Contains(src, `"`+m[1]+`"`) {
				t.Errorf("%s lists --%s, which no command in cmd/slipway defines", file, m[1])
			}
		}
	}
	if n < 100 {
		t.Fatalf("found only %d flags in the docs' tables: the table pattern is broken", n)
	}
	t.Logf("%d documented flags checked", n)
}

// metricName finds slipway's metric names in text.
var metricName = regexp.MustCompile(`\bslipway_[a-z_]+[a-z]\b`)

// definedMetrics lists the metrics the code registers: literal names, and
// the swarm controller's, which are built from Namespace, Subsystem and Name.
func definedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	src := goSources(t, "ops", "upgrade", "cmd")
	for _, m := range regexp.MustCompile(`Name:\s*"(slipway_[a-z_]+)"`).FindAllStringSubmatch(src, -1) {
		out[m[1]] = true
	}
	swarm := goSources(t, "ops/swarm/controller")
	for _, m := range regexp.MustCompile(`(?:gauge|counter)\("([a-z_]+)"`).FindAllStringSubmatch(swarm, -1) {
		out["slipway_swarm_"+m[1]] = true
	}
	for _, m := range regexp.MustCompile(`Subsystem: "swarm", Name: "([a-z_]+)"`).FindAllStringSubmatch(swarm, -1) {
		out["slipway_swarm_"+m[1]] = true
	}
	return out
}

// TestMetricTablesMatchTheCode fails when a reference page's metric table
// lists a metric the code does not register, or when the code registers a
// metric no reference page lists.
func TestMetricTablesMatchTheCode(t *testing.T) {
	defined := definedMetrics(t)
	if len(defined) < 30 {
		t.Fatalf("found only %d metrics in the code: the pattern is broken", len(defined))
	}
	documented := map[string]bool{}
	for file, rows := range docTables(t) {
		if filepath.Base(file) != "reference.md" {
			continue
		}
		for _, row := range rows {
			cell := strings.SplitN(strings.TrimPrefix(row, "| "), " |", 2)[0]
			for _, m := range metricName.FindAllString(cell, -1) {
				documented[m] = true
				if !defined[m] {
					t.Errorf("%s lists metric %s, which the code does not register", file, m)
				}
			}
		}
	}
	var missing []string
	for m := range defined {
		if !documented[m] {
			missing = append(missing, m)
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("metric %s is registered by the code but listed in no docs/*/reference.md", m)
	}
}

// TestDocumentedEventsExist fails when the Events table of a reference page
// names a reason no Go source of ops/ spells (an Event renamed or removed).
func TestDocumentedEventsExist(t *testing.T) {
	src := goSources(t, "ops")
	cellName := regexp.MustCompile("`([A-Za-z]+)`")
	n := 0
	for _, f := range markdownFiles(t, "..") {
		if filepath.Base(f) != "reference.md" {
			continue
		}
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		inEvents := false
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "## ") {
				inEvents = line == "## Events"
				continue
			}
			if !inEvents || !strings.HasPrefix(line, "| `") {
				continue
			}
			cell := strings.SplitN(strings.TrimPrefix(line, "| "), " |", 2)[0]
			for _, m := range cellName.FindAllStringSubmatch(cell, -1) {
				n++
				if !strings.Contains(src, `"`+m[1]+`"`) {
					t.Errorf("%s lists Event %s, which no code in ops/ records", f, m[1])
				}
			}
		}
	}
	if n < 40 {
		t.Fatalf("found only %d Events in the reference pages: the pattern is broken", n)
	}
	t.Logf("%d documented Event reasons checked", n)
}

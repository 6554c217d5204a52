package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The trust audit: every read, in slipway's Go code, of a field another
// party can write (a node's agent, its kubelet, a workload, another
// controller) from which the reader decides something carries a marker
// `// trust: <row-id>` on the line above it, and security.md's
// "## Trust audit" tables hold one row per row-id: who writes the field,
// who reads it, what it decides, and why a forged value cannot reach
// another node. TestTrustAudit keeps the two equal.

// trustMarker is a marker line: `// trust: <row-id>`.
var trustMarker = regexp.MustCompile(`^\s*// trust: (\S+)\s*$`)

// trustRowID is the form of a row-id: lowercase words joined by dots
// (each word of letters, digits and hyphens), at least two.
var trustRowID = regexp.MustCompile(`^[a-z][a-z0-9-]*(\.[a-z0-9][a-z0-9-]*)+$`)

// trustHeader is the header every trust audit table has.
const trustHeader = "| Row | Field | Written by | Read by | Decides | Why a forged value cannot reach another node |"

// trustSystems are the tables' headings, one per system.
var trustSystems = []string{"UpdateChannel (ops)", "Update operator", "Swarm", "ExtendedDaemonSet"}

// trustMarkers finds the markers in the non-test Go files under root:
// row-id -> where ("file:line"), and the markers that are malformed.
func trustMarkers(t *testing.T, root string) (map[string][]string, []string) {
	t.Helper()
	found, bad := map[string][]string{}, []string(nil)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != root && (strings.HasPrefix(name, ".") || name == "vendor" || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var pending string // a marker waiting for the read below it
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if pending != "" {
				if code := strings.TrimSpace(line); code == "" || strings.HasPrefix(code, "//") {
					bad = append(bad, pending+": the line below the marker is not the read it marks")
				}
				pending = ""
			}
			if !strings.Contains(line, "// trust:") {
				continue
			}
			where := fmt.Sprintf("%s:%d", rel, n)
			m := trustMarker.FindStringSubmatch(line)
			switch {
			case m == nil:
				bad = append(bad, where+": a trust marker is a line of its own: `// trust: <row-id>`")
			case !trustRowID.MatchString(m[1]):
				bad = append(bad, fmt.Sprintf("%s: row-id %q is not lowercase dotted words (e.g. ops.job.node-pin)", where, m[1]))
			default:
				found[m[1]] = append(found[m[1]], where)
				pending = where
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return found, bad
}

// trustRows reads the "## Trust audit" section of security.md: row-id ->
// its table, and what is wrong with the tables.
func trustRows(t *testing.T, doc string) (map[string]string, []string) {
	t.Helper()
	rows, bad := map[string]string{}, []string(nil)
	in, table, header := false, "", false
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = strings.TrimSpace(line) == "## Trust audit"
			continue
		case !in:
			continue
		case strings.HasPrefix(line, "### "):
			table, header = strings.TrimSpace(strings.TrimPrefix(line, "### ")), false
			if !slices.Contains(trustSystems, table) {
				bad = append(bad, fmt.Sprintf("table %q: the trust audit's tables are %q", table, trustSystems))
			}
			continue
		case !strings.HasPrefix(line, "|"):
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		switch {
		case strings.HasPrefix(line, "| Row |"):
			header = true
			if strings.TrimSpace(line) != trustHeader {
				bad = append(bad, fmt.Sprintf("table %q: header %q, want %q", table, line, trustHeader))
			}
			continue
		case strings.HasPrefix(line, "|---") || strings.HasPrefix(line, "| ---"):
			continue
		case !header || table == "":
			bad = append(bad, fmt.Sprintf("row %q outside a table with the trust audit's header", line))
			continue
		}
		id := strings.TrimSpace(cells[0])
		if !strings.HasPrefix(id, "`") || !strings.HasSuffix(id, "`") || !trustRowID.MatchString(strings.Trim(id, "`")) {
			bad = append(bad, fmt.Sprintf("table %q: row %q: the Row cell is the row-id in backticks", table, line))
			continue
		}
		id = strings.Trim(id, "`")
		if len(cells) != 6 {
			bad = append(bad, fmt.Sprintf("row %s has %d cells, not 6", id, len(cells)))
		}
		for i, c := range cells {
			if strings.TrimSpace(c) == "" {
				bad = append(bad, fmt.Sprintf("row %s: cell %d is empty", id, i+1))
			}
		}
		if prev, dup := rows[id]; dup {
			bad = append(bad, fmt.Sprintf("row %s twice (tables %q and %q)", id, prev, table))
		}
		rows[id] = table
	}
	return rows, bad
}

// TestTrustAudit fails when a trust marker in the code has no row in
// security.md's trust audit, when a row has no marker, or when either is
// malformed.
func TestTrustAudit(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "\n## Trust audit\n") {
		t.Fatal("docs/security.md has no `## Trust audit` section")
	}
	markers, badMarkers := trustMarkers(t, root)
	rows, badRows := trustRows(t, string(doc))
	for _, b := range append(badMarkers, badRows...) {
		t.Error(b)
	}
	for id, where := range markers {
		if _, ok := rows[id]; !ok {
			t.Errorf("trust marker %s (%s) has no row in docs/security.md's trust audit: add one saying who writes the field, who reads it, what it decides and why a forged value cannot reach another node",
				id, strings.Join(where, ", "))
		}
	}
	for id, table := range rows {
		if _, ok := markers[id]; !ok {
			t.Errorf("trust audit row %s (table %q) has no `// trust: %s` marker above a read in the code", id, table, id)
		}
	}
	if len(markers) == 0 {
		t.Error("no trust marker in the code")
	}
}

// repoRoot is the repository's root: the directory above this package's
// that holds go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod above the docs package: %v", err)
	}
	return root
}

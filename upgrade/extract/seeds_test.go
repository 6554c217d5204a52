package extract

import (
	"archive/tar"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteFuzzSeeds regenerates testdata/fuzz/FuzzTar when
// SLIPWAY_WRITE_SEEDS=1; otherwise it checks that the seeds exist.
func TestWriteFuzzSeeds(t *testing.T) {
	seeds := map[string][]entry{
		"valid":    {{name: "d/", typ: tar.TypeDir}, {name: "d/f", body: "hello"}, {name: "d/l", link: "f", typ: tar.TypeSymlink}, {name: "d/h", link: "d/f", typ: tar.TypeLink}},
		"dotdot":   {{name: "../evil", body: "x"}},
		"absolute": {{name: "/tmp/evil", body: "x"}},
		"symlink":  {{name: "l", link: "../..", typ: tar.TypeSymlink}, {name: "l/evil", body: "x"}},
		"chain":    {{name: "a", link: ".", typ: tar.TypeSymlink}, {name: "a/b", link: "..", typ: tar.TypeSymlink}, {name: "a/b/evil", body: "x"}},
		"hardlink": {{name: "h", link: "../outside", typ: tar.TypeLink}},
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzTar")
	for name, ents := range seeds {
		p := filepath.Join(dir, name)
		if os.Getenv("SLIPWAY_WRITE_SEEDS") != "1" {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("missing fuzz seed %s (regenerate with SLIPWAY_WRITE_SEEDS=1): %v", p, err)
			}
			continue
		}
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", mkTar(t, ents...))
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

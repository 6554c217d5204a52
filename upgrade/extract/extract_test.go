package extract

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func mkTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: mode, Linkname: e.link, Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func extractTo(t *testing.T, data []byte, mapFn Mapper) (string, Stats, error) {
	t.Helper()
	parent := t.TempDir()
	dir := filepath.Join(parent, "root")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	st, err := Tar(bytes.NewReader(data), root, Options{Map: mapFn})
	checkConfined(t, parent)
	return dir, st, err
}

// checkConfined fails when anything but root/ exists in parent, or a symlink
// in root resolves lexically outside it.
func checkConfined(t testing.TB, parent string) {
	t.Helper()
	ents, _ := os.ReadDir(parent)
	if len(ents) != 1 || ents[0].Name() != "root" {
		t.Fatalf("extraction wrote outside its root: %v", ents)
	}
	root := filepath.Join(parent, "root")
	_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			return nil
		}
		target, _ := os.Readlink(p)
		if filepath.IsAbs(target) {
			t.Fatalf("absolute symlink %s -> %s", p, target)
		}
		rel, _ := filepath.Rel(root, filepath.Join(filepath.Dir(p), target))
		if !filepath.IsLocal(rel) && rel != "." {
			t.Fatalf("symlink %s -> %s leaves the root", p, target)
		}
		return nil
	})
}

func TestTarExtracts(t *testing.T) {
	data := mkTar(t,
		entry{name: "v1/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "v1/bin/k3s", body: "binary", mode: 0o4755},
		entry{name: "v1/bin/kubectl", link: "k3s", typ: tar.TypeSymlink},
		entry{name: "v1/bin/crictl", link: "v1/bin/k3s", typ: tar.TypeLink},
		entry{name: "v1/up", link: "../v1/bin", typ: tar.TypeSymlink},
		entry{name: "skip/me", body: "x"},
	)
	dir, st, err := extractTo(t, data, func(n string) (string, bool) {
		return n, !strings.HasPrefix(n, "skip")
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 1 || st.Symlinks != 2 || st.Hardlinks != 1 || st.Bytes != 6 {
		t.Fatalf("stats %+v", st)
	}
	fi, err := os.Stat(filepath.Join(dir, "v1/bin/k3s"))
	if err != nil || fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Fatalf("k3s mode: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "v1/bin/crictl")); string(b) != "binary" {
		t.Fatalf("hard link content %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "skip")); !os.IsNotExist(err) {
		t.Fatal("mapper did not skip")
	}
}

func TestTarRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
	}{
		{"dotdot", []entry{{name: "a/../../evil", body: "x"}}},
		{"absolute", []entry{{name: "/etc/evil", body: "x"}}},
		{"symlink absolute", []entry{{name: "l", link: "/etc", typ: tar.TypeSymlink}}},
		{"symlink escapes", []entry{{name: "a/l", link: "../../x", typ: tar.TypeSymlink}}},
		{"write through symlink", []entry{{name: "l", link: ".", typ: tar.TypeSymlink}, {name: "l/x", body: "x"}}},
		{"chained symlink escape", []entry{{name: "a", link: ".", typ: tar.TypeSymlink}, {name: "a/b", link: "..", typ: tar.TypeSymlink}}},
		{"hardlink outside", []entry{{name: "h", link: "../../etc/passwd", typ: tar.TypeLink}}},
		{"hardlink absolute", []entry{{name: "h", link: "/etc/passwd", typ: tar.TypeLink}}},
		{"hardlink to missing", []entry{{name: "h", link: "nothere", typ: tar.TypeLink}}},
		{"device", []entry{{name: "dev", typ: tar.TypeChar}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := extractTo(t, mkTar(t, tc.entries...), nil)
			if !errors.Is(err, ErrUnsafe) {
				t.Fatalf("err = %v, want ErrUnsafe", err)
			}
		})
	}
}

func TestTarTruncated(t *testing.T) {
	data := mkTar(t, entry{name: "f", body: strings.Repeat("x", 5000)})
	if _, _, err := extractTo(t, data[:1500], nil); err == nil {
		t.Fatal("truncated tar: want an error")
	}
}

// FuzzTar: whatever the archive, nothing is written outside the root and no
// symlink left inside points outside it.
func FuzzTar(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "root")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		_, _ = Tar(bytes.NewReader(data), root, Options{})
		checkConfined(t, parent)
	})
}

// Files over more directories than are kept open, in an order that leaves
// and comes back to each, land where they belong with their times; a later
// entry of the same name replaces a file or a symlink.
func TestTarManyDirectoriesAndReplacedEntries(t *testing.T) {
	var entries []entry
	for round := 0; round < 2; round++ {
		for d := 0; d < 2*dirCacheSize+3; d++ {
			entries = append(entries, entry{name: fmt.Sprintf("d%02d/sub/f%d", d, round), body: fmt.Sprintf("%d/%d", d, round)})
		}
	}
	entries = append(entries,
		entry{name: "d00/sub/f0", body: "replaced"},
		entry{name: "d01/sub/l", link: "f0", typ: tar.TypeSymlink},
		entry{name: "d01/sub/l", body: "a file where a link was"},
	)
	dir, st, err := extractTo(t, mkTar(t, entries...), nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != len(entries)-1 || st.Symlinks != 1 {
		t.Fatalf("stats %+v", st)
	}
	for _, e := range entries[:len(entries)-3] {
		if e.name == "d00/sub/f0" {
			e.body = "replaced"
		}
		p := filepath.Join(dir, e.name)
		if b, err := os.ReadFile(p); err != nil || string(b) != e.body {
			t.Fatalf("%s: %q, %v; want %q", e.name, b, err, e.body)
		}
		if fi, _ := os.Stat(p); !fi.ModTime().Equal(time.Unix(1700000000, 0)) {
			t.Fatalf("%s: mtime %v", e.name, fi.ModTime())
		}
	}
	fi, err := os.Lstat(filepath.Join(dir, "d01/sub/l"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("d01/sub/l: %v, %v; want the file that replaced the link", fi, err)
	}
}

// A file is not created where a directory was extracted.
func TestTarFileOverDirectoryRefused(t *testing.T) {
	data := mkTar(t, entry{name: "a/b/f", body: "x"}, entry{name: "a/b", body: "y"})
	if _, _, err := extractTo(t, data, nil); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("err = %v, want a directory of that name refused", err)
	}
}

// A link found in the root leads files into its target; once an entry
// replaces the link with a file, no file goes there through it any more.
func TestTarReplacedLinkNoLongerLeadsAnywhere(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "root")
	if err := os.MkdirAll(filepath.Join(dir, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(dir, "s")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	data := mkTar(t, entry{name: "s/f", body: "x"}, entry{name: "s", body: "now a file"}, entry{name: "s/g", body: "y"})
	if _, err := Tar(bytes.NewReader(data), root, Options{}); err == nil {
		t.Fatal("s/g was written although s is a file")
	}
	if _, err := os.Stat(filepath.Join(dir, "real", "g")); !os.IsNotExist(err) {
		t.Fatalf("real/g: %v; want no file written through the replaced link", err)
	}
	checkConfined(t, parent)
}

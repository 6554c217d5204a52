package channel

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeMirror lays out <dir>/<version>/<artifact> for each entry.
func writeMirror(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func newSource(t *testing.T, raw string, opts Options) Source {
	t.Helper()
	src, err := New(raw, opts)
	if err != nil {
		t.Fatalf("New(%q): %v", raw, err)
	}
	return src
}

func readAll(t *testing.T, src Source, version, artifact string) (string, int64) {
	t.Helper()
	rc, size, err := src.Open(context.Background(), version, artifact)
	if err != nil {
		t.Fatalf("Open(%s, %s): %v", version, artifact, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s/%s: %v", version, artifact, err)
	}
	return string(b), size
}

func TestMirrorLatestFile(t *testing.T) {
	dir := writeMirror(t, map[string]string{"latest": "\n v2 \nignored\n", "v1/a": "one", "v2/a": "two"})
	for _, raw := range []string{dir, "file://" + dir} {
		src := newSource(t, raw, Options{})
		v, err := src.Latest(context.Background())
		if err != nil || v != "v2" {
			t.Fatalf("%s: Latest = %q, %v; want v2", raw, v, err)
		}
		if got, size := readAll(t, src, "v1", "a"); got != "one" || size != 3 {
			t.Fatalf("%s: v1/a = %q size %d", raw, got, size)
		}
		if !strings.Contains(src.String(), dir) {
			t.Fatalf("String() = %q, want the directory", src)
		}
	}
}

func TestMirrorLatestSymlink(t *testing.T) {
	dir := writeMirror(t, map[string]string{"v1/a": "one", "v2/a": "two"})
	for _, target := range []string{"v2", "./v2/", filepath.Join(dir, "v2")} {
		p := filepath.Join(dir, "latest")
		os.Remove(p)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		v, err := newSource(t, dir, Options{}).Latest(context.Background())
		if err != nil || v != "v2" {
			t.Fatalf("latest -> %s: Latest = %q, %v; want v2", target, v, err)
		}
	}
}

func TestMirrorLatestErrors(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(dir string) error
		notFound bool
		want     string
	}{
		{"missing", func(string) error { return nil }, true, "create"},
		{"empty file", func(d string) error { return os.WriteFile(filepath.Join(d, "latest"), []byte("\n\n"), 0o644) }, false, "is empty"},
		{"not a version", func(d string) error { return os.WriteFile(filepath.Join(d, "latest"), []byte("<html>"), 0o644) }, false, "not a version"},
		{"version dir missing", func(d string) error { return os.WriteFile(filepath.Join(d, "latest"), []byte("v9"), 0o644) }, true, "v9"},
		{"dangling symlink", func(d string) error { return os.Symlink("v7", filepath.Join(d, "latest")) }, true, "v7"},
		{"directory", func(d string) error { return os.Mkdir(filepath.Join(d, "latest"), 0o755) }, false, "must be a file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeMirror(t, map[string]string{"v1/a": "one"})
			if err := tt.setup(dir); err != nil {
				t.Fatal(err)
			}
			_, err := newSource(t, dir, Options{}).Latest(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, ErrNotFound) != tt.notFound {
				t.Fatalf("Latest error = %v; want %q, ErrNotFound=%v", err, tt.want, tt.notFound)
			}
		})
	}
}

func TestMirrorOpenErrors(t *testing.T) {
	dir := writeMirror(t, map[string]string{"v1/a": "one", "v1/b": "bee", "v2/a": "two"})
	if err := os.Mkdir(filepath.Join(dir, "v1", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := newSource(t, dir, Options{})
	tests := []struct {
		version, artifact string
		notFound          bool
		want              []string
	}{
		{"v3", "a", true, []string{filepath.Join(dir, "v3"), "versions present: v1, v2"}},
		{"v1", "c", true, []string{filepath.Join(dir, "v1", "c"), "files present: a, b"}},
		{"v1", "sub", false, []string{"not a regular file"}},
		{"v1", "../v2/a", false, []string{"slash"}},
		{"latest", "a", false, []string{"resolved with Latest"}},
	}
	for _, tt := range tests {
		rc, _, err := src.Open(context.Background(), tt.version, tt.artifact)
		if err == nil {
			rc.Close()
			t.Fatalf("Open(%s, %s) succeeded", tt.version, tt.artifact)
		}
		if errors.Is(err, ErrNotFound) != tt.notFound {
			t.Errorf("Open(%s, %s): %v; want ErrNotFound=%v", tt.version, tt.artifact, err, tt.notFound)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open(%s, %s): %v; want it to mention %q", tt.version, tt.artifact, err, w)
			}
		}
	}
}

func TestMirrorCancelled(t *testing.T) {
	dir := writeMirror(t, map[string]string{"latest": "v1", "v1/a": "one"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	src := newSource(t, dir, Options{})
	if _, err := src.Latest(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Latest on a cancelled context: %v", err)
	}
	if _, _, err := src.Open(ctx, "v1", "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open on a cancelled context: %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	rc, _, err := src.Open(ctx, "v1", "a")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	cancel()
	if _, err := io.ReadAll(rc); !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %v, want context.Canceled", err)
	}
}

func TestSizedReader(t *testing.T) {
	tests := []struct {
		content string
		want    int64
		ok      bool
	}{
		{"abc", 3, true},
		{"abc", -1, true},
		{"ab", 3, false},
		{"abcd", 3, false},
		{"", 0, true},
	}
	for _, tt := range tests {
		r := newSizedReader(io.NopCloser(strings.NewReader(tt.content)), tt.want, "x")
		_, err := io.ReadAll(r)
		if (err == nil) != tt.ok {
			t.Errorf("content %q announced %d: err %v, want ok=%v", tt.content, tt.want, err, tt.ok)
		}
	}
}

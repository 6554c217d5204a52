package channel

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkOpen reads a 64 MiB artifact from a mirror directory and over
// loopback HTTP.
func BenchmarkOpen(b *testing.B) {
	dir := b.TempDir()
	data := make([]byte, 64<<20)
	if err := os.MkdirAll(filepath.Join(dir, "v1"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "v1", "a"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	os.Symlink(".", filepath.Join(dir, "download"))
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()
	for name, raw := range map[string]string{"mirror": dir, "http": srv.URL + "/latest"} {
		b.Run(name, func(b *testing.B) {
			src, err := New(raw, Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				rc, _, err := src.Open(context.Background(), "v1", "a")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, struct{ io.Reader }{rc}); err != nil {
					b.Fatal(err)
				}
				rc.Close()
			}
		})
	}
}

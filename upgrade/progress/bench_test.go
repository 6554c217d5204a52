package progress

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// BenchmarkWrap measures the cost of counting and reporting on a 64 MiB copy.
func BenchmarkWrap(b *testing.B) {
	data := bytes.Repeat([]byte{'x'}, 64<<20)
	for _, mode := range []struct {
		name string
		wrap bool
		term bool
	}{{"raw", false, false}, {"plain", true, false}, {"bar", true, true}} {
		b.Run(mode.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			r := New(io.Discard, Options{Interval: time.Second, Terminal: &mode.term})
			for b.Loop() {
				var rc io.ReadCloser = io.NopCloser(bytes.NewReader(data))
				if mode.wrap {
					rc = r.Wrap(rc, "x", int64(len(data)))
				}
				if _, err := io.Copy(io.Discard, struct{ io.Reader }{rc}); err != nil {
					b.Fatal(err)
				}
				rc.Close()
			}
		})
	}
}

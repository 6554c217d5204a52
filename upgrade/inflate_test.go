package upgrade

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"
)

// gzipped returns n pseudo-random, compressible bytes and their gzip stream.
func gzipped(t *testing.T, n int) (plain, gz []byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	plain = make([]byte, n)
	for i := range plain {
		plain[i] = "abcdefgh"[rng.IntN(8)]
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return plain, buf.Bytes()
}

// Several queued blocks and a last partial one come out whole and in order,
// read with small and odd-sized reads as a tar reader does.
func TestInflateManyBlocks(t *testing.T) {
	plain, gz := gzipped(t, 2*inflateBlocks*inflateBlockSize+12345)
	zr, err := inflate(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	got, err := readInOddSizes(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, plain) {
		t.Fatalf("inflated %d bytes, not the %d written", len(got), len(plain))
	}
	if n, err := zr.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("after the end: %d, %v; want 0, EOF", n, err)
	}
}

// A stream corrupted in its middle, cut short, or with a wrong trailer ends
// with an error, never with a clean io.EOF.
func TestInflateBrokenStreams(t *testing.T) {
	_, gz := gzipped(t, 3*inflateBlockSize)
	for name, broken := range map[string][]byte{
		"cut short":    gz[:len(gz)/2],
		"middle":       flip(gz, len(gz)/2),
		"trailer CRC":  flip(gz, len(gz)-6),
		"trailer size": flip(gz, len(gz)-2),
	} {
		t.Run(name, func(t *testing.T) {
			zr, err := inflate(bytes.NewReader(broken))
			if err != nil {
				t.Fatal(err)
			}
			defer zr.Close()
			if _, err := io.Copy(io.Discard, zr); err == nil {
				t.Fatal("read to the end without an error")
			}
		})
	}
}

// readInOddSizes reads r to its end in reads of 512 bytes (a tar header),
// 1 byte, and 100 KiB.
func readInOddSizes(r io.Reader) ([]byte, error) {
	var out []byte
	for i := 0; ; i++ {
		buf := make([]byte, []int{512, 1, 100 << 10}[i%3])
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

func flip(b []byte, at int) []byte {
	c := bytes.Clone(b)
	c[at] ^= 0xff
	return c
}

// Close returns while the goroutine waits for a full queue to be read.
func TestInflateCloseWhileQueued(t *testing.T) {
	_, gz := gzipped(t, 3*inflateBlocks*inflateBlockSize)
	zr, err := inflate(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zr.Read(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { zr.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
}

// Not a gzip stream: inflate says so at once.
func TestInflateNotGzip(t *testing.T) {
	if _, err := inflate(bytes.NewReader([]byte("not gzip at all"))); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("err = %v, want a gzip header error", err)
	}
}

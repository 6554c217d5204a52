package channel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// sizedReader turns a body that ends before (or runs past) its announced
// size into an error, so a truncated download is never taken as complete.
type sizedReader struct {
	rc   io.ReadCloser
	want int64 // -1: unknown, no check
	got  int64
	name string
}

func newSizedReader(rc io.ReadCloser, want int64, name string) io.ReadCloser {
	return &sizedReader{rc: rc, want: want, name: name}
}

func (s *sizedReader) Read(p []byte) (int, error) {
	n, err := s.rc.Read(p)
	s.got += int64(n)
	if s.want >= 0 && s.got > s.want {
		return n, fmt.Errorf("%s: got more than the announced %d bytes; the source changed during the download, retry", s.name, s.want)
	}
	truncated := errors.Is(err, io.ErrUnexpectedEOF) || (err == io.EOF && s.want >= 0 && s.got < s.want)
	if truncated && s.want < 0 {
		return n, fmt.Errorf("%s: truncated after %d bytes; retry the download: %w", s.name, s.got, io.ErrUnexpectedEOF)
	}
	if truncated {
		return n, fmt.Errorf("%s: truncated after %d of %d bytes; retry the download: %w", s.name, s.got, s.want, io.ErrUnexpectedEOF)
	}
	return n, err
}

func (s *sizedReader) Close() error { return s.rc.Close() }

// ctxReader stops reading once its context is done, so a long copy from a
// slow mirror (NFS, USB) can be cancelled.
type ctxReader struct {
	ctx context.Context
	io.ReadCloser
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.ReadCloser.Read(p)
}

// identity asks every request (redirects included) for the stored bytes:
// with an explicit Accept-Encoding, net/http never decompresses a body on
// its own, so a .tar.gz served with "Content-Encoding: gzip" (common with
// object stores) still matches its checksum.
type identity struct{ base http.RoundTripper }

func (t identity) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Accept-Encoding", "identity")
	return t.base.RoundTrip(req)
}

// downloadClient is c with its transport wrapped in identity.
func downloadClient(c *http.Client) *http.Client {
	d := *c
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	d.Transport = identity{base}
	return &d
}

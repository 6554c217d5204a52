package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// Tenure says until when the holder of a Lease may still act on it: a
// holder stalled (a starved CPU, a slow API server) can go on writing after
// another candidate took the Lease over, and a write that must never come
// from two holders at once (a controller starting node updates under a
// max-concurrency bound) is made under Fence, or through a client whose
// transport WrapTransport fences.
//
// A renewal read at instant t is written with renewTime t; another
// candidate takes the Lease only Duration after it first read that
// renewal, so no earlier than t + Duration. Fence's deadline is t +
// RenewDeadline: a write under it is sent, or dropped, before anyone else
// can hold the Lease, Duration − RenewDeadline sooner. (The API server also
// gives up a request whose client went away, so a request stuck in its
// queue past the deadline is not carried out late.)
//
// The tenure's end is kept on the monotonic clock: it is at + RenewDeadline
// where at is a time.Now() reading, which carries the monotonic clock, and
// Go compares and subtracts two such readings on it alone. A wall clock
// stepped backward (NTP) therefore does not extend a tenure, nor a stepped
// forward one shorten it: Fence, Until compared with time.Now(), and
// time.Until(Until()) all count real elapsed time.
//
// A zero Tenure is not held: its Fence is done at once. A nil *Tenure
// fences nothing, for a controller run without election.
type Tenure struct {
	until atomic.Pointer[time.Time] // nil: not held
}

// renewed records a take or renewal whose read began at at (a time.Now()
// reading: its monotonic clock reading is kept).
func (t *Tenure) renewed(at time.Time, renewDeadline time.Duration) {
	if t != nil {
		until := at.Add(renewDeadline)
		t.until.Store(&until)
	}
}

// lost records that the Lease is no longer held.
func (t *Tenure) lost() {
	if t != nil {
		t.until.Store(nil)
	}
}

// Until is the instant the current tenure ends unless renewed; the zero
// time when the Lease is not held. It carries a monotonic clock reading:
// compare it with time.Now() (or time.Until) only, never after stripping it
// (Round(0), UnixNano, serialising): that would compare wall clocks.
func (t *Tenure) Until() time.Time {
	if t == nil {
		return time.Time{}
	}
	if u := t.until.Load(); u != nil {
		return *u
	}
	return time.Time{}
}

// Fence is ctx ending when the tenure does (as of now: a later renewal does
// not extend it; take a new Fence for each write). Without a tenure held,
// it is already done; on a nil *Tenure, it is ctx.
func (t *Tenure) Fence(ctx context.Context) (context.Context, context.CancelFunc) {
	if t == nil {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, t.Until())
}

// ErrTenureEnded is why a fenced write was not sent.
var ErrTenureEnded = errors.New("not sent: this candidate's Lease tenure ended (another candidate may hold the Lease)")

// WrapTransport fences every write that goes through rt (every method but
// GET and HEAD: reads and watches go on) by the tenure, for
// rest.Config.Wrap. A client so wrapped cannot renew the Lease itself once
// the tenure ended: give the elector a client of its own. On a nil *Tenure
// it returns rt.
func (t *Tenure) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	if t == nil {
		return rt
	}
	return fencedTransport{tenure: t, next: rt}
}

type fencedTransport struct {
	tenure *Tenure
	next   http.RoundTripper
}

func (f fencedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet || req.Method == http.MethodHead {
		return f.next.RoundTrip(req)
	}
	ctx, cancel := f.tenure.Fence(req.Context())
	if ctx.Err() != nil {
		cancel()
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, ErrTenureEnded)
	}
	resp, err := f.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose ends a fenced request's context once its body is read.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

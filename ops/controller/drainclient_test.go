package controller

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// blockingTransport holds each request until release is closed and says
// whether the request's context ended meanwhile.
type blockingTransport struct {
	sent, release chan struct{}
	cut           chan bool
}

func (b *blockingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	close(b.sent)
	<-b.release
	b.cut <- r.Context().Err() != nil
	return &http.Response{StatusCode: http.StatusCreated, Body: io.NopCloser(strings.NewReader("{}"))}, nil
}

// An eviction sent is not cut off when the controller stops meanwhile (its
// context ends): the API server could count it against the pod's budget
// without deleting the pod, and refuse every other eviction for two
// minutes. The stopping controller waits for it (inFlight).
func TestEvictionNotCutOff(t *testing.T) {
	inner := &blockingTransport{sent: make(chan struct{}), release: make(chan struct{}), cut: make(chan bool, 1)}
	var inFlight sync.RWMutex
	guard := &guardTransport{next: inner, inFlight: &inFlight}
	ctx, stop := context.WithCancel(withConfirm(context.Background(), func(context.Context) error { return nil }))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://api/api/v1/namespaces/default/pods/web/eviction", nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		resp, err := guard.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-inner.sent
	stop() // the controller stops while the eviction is on its way
	locked := make(chan struct{})
	go func() { inFlight.Lock(); close(locked) }()
	select {
	case <-locked:
		t.Fatal("the stopping controller did not wait for the eviction in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(inner.release)
	if <-inner.cut {
		t.Error("the eviction's request was cut off when the controller stopped")
	}
	if err := <-done; err != nil {
		t.Errorf("the eviction failed: %v", err)
	}
	<-locked
	inFlight.Unlock()

	// Not sent at all once stopped: the slot is confirmed with the stopped context.
	confirmGone := withConfirm(context.Background(), func(c context.Context) error { return c.Err() })
	cancelled, cancel := context.WithCancel(confirmGone)
	cancel()
	req, _ = http.NewRequestWithContext(cancelled, http.MethodPost, "https://api/api/v1/namespaces/default/pods/web/eviction", nil)
	if _, err := guard.RoundTrip(req); err == nil {
		t.Error("an eviction was sent after the controller stopped")
	}
}

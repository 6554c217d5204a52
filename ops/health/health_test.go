package health

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestStalled(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		loops map[string]Beat
		now   time.Time
		want  string // "" = healthy; else substrings, ";"-separated
	}{
		{"no loops", nil, t0, ""},
		{"beat just now", map[string]Beat{"sync": {t0, time.Minute}}, t0, ""},
		{"at the allowance", map[string]Beat{"sync": {t0, time.Minute}}, t0.Add(time.Minute), ""},
		{"past the allowance", map[string]Beat{"sync": {t0, time.Minute}}, t0.Add(61 * time.Second), "loop sync silent for 1m1s (allowed 1m0s)"},
		{"one of two", map[string]Beat{"a": {t0, time.Hour}, "b": {t0, time.Second}}, t0.Add(time.Minute), "loop b silent"},
		{"both, in name order", map[string]Beat{"z": {t0, time.Second}, "a": {t0, time.Second}}, t0.Add(time.Minute), "loop a silent;loop z silent"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Stalled(c.loops, c.now)
			if c.want == "" {
				if err != nil {
					t.Fatalf("want healthy, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want %q, got healthy", c.want)
			}
			msg := err.Error()
			last := -1
			for _, part := range strings.Split(c.want, ";") {
				i := strings.Index(msg, part)
				if i < 0 || i < last {
					t.Fatalf("error %q lacks %q in order", msg, part)
				}
				last = i
			}
		})
	}
}

// TestWedgedLoopTurnsHealthzRed: a loop that stops beating turns /healthz
// 503 once its allowance passes, and a beat turns it green again; /readyz
// follows its conditions.
func TestWedgedLoopTurnsHealthzRed(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := New()
	p.now = func() time.Time { return now }
	beat := p.Loop("sync", 30*time.Second)
	synced := false
	p.ReadyWhen("nodes informer", func() bool { return synced })
	mux := http.NewServeMux()
	p.Install(mux)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("fresh loop: /healthz %d", code)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "nodes informer") {
		t.Fatalf("unsynced: /readyz %d %q", code, body)
	}
	synced = true
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Fatalf("synced: /readyz %d", code)
	}
	now = now.Add(31 * time.Second) // the loop is wedged: no beat
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "loop sync silent for 31s") {
		t.Fatalf("wedged: /healthz %d %q", code, body)
	}
	beat()
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("after a beat: /healthz %d", code)
	}
}

// An address already taken is an error at start, naming it; "" serves nothing.
func TestListenAndServeRefusesATakenAddress(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = ListenAndServe(ctx, taken.Addr().String(), http.NewServeMux(), nil)
	if err == nil || !strings.Contains(err.Error(), taken.Addr().String()) {
		t.Errorf("serving on a taken address: %v, want an error naming it", err)
	}
	if err := ListenAndServe(ctx, "", http.NewServeMux(), nil); err != nil {
		t.Errorf(`serving on "": %v`, err)
	}
}

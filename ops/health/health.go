// Package health serves a long-running component's /healthz and /readyz.
//
// Liveness is about the component's own loops: each loop registers with
// Loop and beats at every turn, and an idle loop beats on a timer of its own.
// A loop that has not beaten within its allowance (wedged in a call that
// never returns, blocked on a lock) turns /healthz red, so the kubelet
// restarts the container. Readiness is about what the component needs before
// it can act: informers synced, a first list done. An elected controller that
// is not the leader is healthy and ready: it is waiting, not stuck.
package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Probe holds a component's loops and readiness conditions.
type Probe struct {
	mu    sync.Mutex
	now   func() time.Time
	loops map[string]*loop
	ready []readiness
}

type loop struct {
	last   time.Time
	within time.Duration
}

type readiness struct {
	name string
	ok   func() bool
}

// New returns a Probe with no loops and no conditions: healthy and ready.
func New() *Probe {
	return &Probe{now: time.Now, loops: map[string]*loop{}}
}

// Loop registers a loop that must beat at least every within, and returns
// its beat. The loop counts as having beaten at registration.
func (p *Probe) Loop(name string, within time.Duration) (beat func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := &loop{last: p.now(), within: within}
	p.loops[name] = l
	return func() {
		p.mu.Lock()
		l.last = p.now()
		p.mu.Unlock()
	}
}

// ReadyWhen adds a readiness condition, such as an informer's HasSynced.
func (p *Probe) ReadyWhen(name string, ok func() bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready = append(p.ready, readiness{name: name, ok: ok})
}

// Live returns nil when every loop beat within its allowance, else an error
// naming the loops that did not and for how long they have been silent.
func (p *Probe) Live() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stalled(p.loopsView(), p.now())
}

func (p *Probe) loopsView() map[string]Beat {
	view := make(map[string]Beat, len(p.loops))
	for name, l := range p.loops {
		view[name] = Beat{Last: l.last, Within: l.within}
	}
	return view
}

// Ready returns nil when every readiness condition holds, else an error
// naming those that do not.
func (p *Probe) Ready() error {
	p.mu.Lock()
	conds := append([]readiness(nil), p.ready...)
	p.mu.Unlock()
	var waiting []string
	for _, c := range conds {
		if !c.ok() {
			waiting = append(waiting, c.name)
		}
	}
	if len(waiting) > 0 {
		return fmt.Errorf("not ready: waiting for %v", waiting)
	}
	return nil
}

// Beat is one loop's last beat and its allowance.
type Beat struct {
	Last   time.Time
	Within time.Duration
}

// Stalled is the liveness decision: the loops whose last beat is older than
// their allowance at now, in name order, as one error (nil when none).
func Stalled(loops map[string]Beat, now time.Time) error {
	var names []string
	for name := range loops {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		b := loops[name]
		if silent := now.Sub(b.Last); silent > b.Within {
			errs = append(errs, fmt.Errorf("loop %s silent for %s (allowed %s)", name, silent.Round(time.Second), b.Within))
		}
	}
	return errors.Join(errs...)
}

// Install serves /healthz (liveness) and /readyz (readiness) on mux: 200 "ok",
// or 503 with the reason.
func (p *Probe) Install(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", serve(p.Live))
	mux.HandleFunc("/readyz", serve(p.Ready))
}

// ListenAndServe listens on addr ("" = off: nothing is served) and serves
// h there until ctx ends (Serve). An address that cannot be listened on is
// an error at once, not a log line once the component runs unobserved.
func ListenAndServe(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s (change the address flag, or free the port): %w", addr, err)
	}
	Serve(ctx, ln, h, log)
	return nil
}

// Serve serves h on ln until ctx ends, then shuts the server down (2 s
// for requests in flight); it returns at once. A server that stops on its
// own is logged.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
}

func serve(check func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

package eds

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// errKilled is what every request of a killed replica gets: its process is gone.
var errKilled = errors.New("the controller process was killed")

// severable passes requests on until cut, then fails them all, as the
// connections of a killed process fail: nothing it would still send
// reaches the API server.
type severable struct {
	rt  http.RoundTripper
	cut *atomic.Bool
}

func (s severable) RoundTrip(r *http.Request) (*http.Response, error) {
	if s.cut.Load() {
		return nil, errKilled
	}
	return s.rt.RoundTrip(r)
}

// replica is one controller process of a leader-elected pair, in the
// test's namespace. It is stopped gracefully (its context ends: it stops
// leading and releases the Lease) or killed (its connections are cut
// first: the Lease stays held until it expires or the same identity, a
// restarted container of the same pod, comes back and renews it).
type replica struct {
	h        *harness
	identity string
	out      io.Writer

	mu        sync.Mutex
	running   bool
	cancel    context.CancelFunc
	cut       *atomic.Bool
	done      chan error
	restartAt time.Time // when down: when it comes back
	starts    int
}

func (h *harness) replicas(out io.Writer, ids ...string) []*replica {
	var rs []*replica
	for _, id := range ids {
		r := &replica{h: h, identity: id, out: out}
		if err := r.start(); err != nil {
			h.t.Fatal(err)
		}
		rs = append(rs, r)
	}
	h.t.Cleanup(func() {
		for _, r := range rs {
			if err := r.stop(false); err != nil {
				h.t.Errorf("replica %s at the end: %v", r.identity, err)
			}
		}
	})
	return rs
}

// start runs a new process of the replica (the same identity).
func (r *replica) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		return nil
	}
	cut := &atomic.Bool{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return severable{rt: rt, cut: cut} }
	log := slog.New(slog.NewTextHandler(r.out, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", r.identity)
	c, err := New(Options{Config: cfg, Namespace: r.h.ns, LeaderElect: true, LeaseNamespace: r.h.ns,
		Identity: r.identity, Log: log})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	r.running, r.cancel, r.cut, r.done = true, cancel, cut, done
	r.starts++
	return nil
}

// stop ends the running process, killed or gracefully, and waits until it
// has stopped. A graceful stop must end without error.
func (r *replica) stop(kill bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.running {
		return nil
	}
	r.running = false
	if kill {
		r.cut.Store(true)
	}
	r.cancel()
	select {
	case err := <-r.done:
		if kill || (err != nil && strings.Contains(err.Error(), "caches did not fill")) {
			return nil // a killed process, or one stopped while it started, says nothing of interest
		}
		return err
	case <-time.After(20 * time.Second):
		return errors.New("the controller did not stop within 20s of its context ending")
	}
}

// down stops the replica and has it come back after delay.
func (r *replica) down(kill bool, delay time.Duration) error {
	err := r.stop(kill)
	r.mu.Lock()
	r.restartAt = time.Now().Add(delay)
	r.mu.Unlock()
	return err
}

// restartIfDue starts the replica again when it is down and its time has come.
func (r *replica) restartIfDue(now time.Time) (bool, error) {
	r.mu.Lock()
	due := !r.running && !now.Before(r.restartAt)
	r.mu.Unlock()
	if !due {
		return false, nil
	}
	return true, r.start()
}

func (r *replica) isRunning() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running
}

// leaseHolder is the identity holding the controller's Lease in the
// test's namespace ("" if none), and when it took the Lease.
func (h *harness) leaseHolder(ctx context.Context) (string, time.Time, error) {
	l, err := h.kube.CoordinationV1().Leases(h.ns).Get(ctx, "slipway-eds-controller", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return "", time.Time{}, err
	}
	var acquired time.Time
	if l.Spec.AcquireTime != nil {
		acquired = l.Spec.AcquireTime.Time
	}
	return *l.Spec.HolderIdentity, acquired, nil
}

// quietAfterTest writes to t's log until closed: the controllers' last
// lines may come after the test ended, and t.Log then panics.
type quietAfterTest struct {
	t      *testing.T
	closed atomic.Bool
}

func (w *quietAfterTest) Write(p []byte) (int, error) {
	if !w.closed.Load() {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

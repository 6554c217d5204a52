package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/member"
	"slipway.dev/slipway/ops/testenv"
)

// cutTransport fails every request while cut: the worker's node cut off
// from the API server.
type cutTransport struct {
	cut  *atomic.Bool
	next http.RoundTripper
}

func (c cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("network unreachable (test partition)")
	}
	return c.next.RoundTrip(r)
}

// A worker cut off from the API server stops its jobs before the
// controller may give them away: its Lease tenure (RenewDeadline after the
// last renewal it began) ends before the Lease lapses as the controller
// judges it (its duration after the controller first saw that renewal, on
// the controller's clock), by about Duration − RenewDeadline. Reconnected,
// it takes its jobs up again.
func TestWorkerStopsBeforeItsJobsMayMove(t *testing.T) {
	e := testenv.Need(t, env)
	kc := kubernetes.NewForConfigOrDie(e.Config)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := fmt.Sprintf("fence-%d", time.Now().UnixNano()%1e9)
	for _, obj := range []func() error{
		func() error {
			_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kc.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "worker:test"}}}}, metav1.CreateOptions{})
			return err
		},
	} {
		if err := obj(); err != nil {
			t.Fatal(err)
		}
	}
	const d = 3 * time.Second
	timing := member.TimingOf(d)
	var cut atomic.Bool
	cfg := rest.CopyConfig(e.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return cutTransport{cut: &cut, next: rt} })
	dir, out := t.TempDir(), filepath.Join(t.TempDir(), "jobs")
	mount(t, dir, shareOf([]string{"cam-1", "cam-2"}, 1))
	done := make(chan error, 1)
	wctx, stop := context.WithCancel(ctx)
	go func() {
		done <- Run(wctx, Options{ConfigFile: filepath.Join(dir, swarmv1.ConfigMapKey), PodName: "w-0", Namespace: ns,
			Out: out, Config: cfg, LeaseDuration: d, Poll: time.Hour})
	}()
	defer func() { stop(); <-done }()
	waitUntil(t, "the jobs running under the worker's Lease", func() bool { return read(out) == "cam-1\ncam-2\n" })

	// The controller's view: the Lease read every 50 ms, judged on its own clock.
	obs := member.NewObserver()
	leases := kc.CoordinationV1().Leases(ns)
	var lapsedAt, stoppedAt atomic.Int64
	watch := func() {
		for end := time.Now().Add(3 * d); time.Now().Before(end) && (lapsedAt.Load() == 0 || stoppedAt.Load() == 0); {
			now := time.Now()
			if stoppedAt.Load() == 0 && read(out) == "" {
				stoppedAt.Store(now.UnixNano())
			}
			if l, err := leases.Get(ctx, member.LeaseName("w-0"), metav1.GetOptions{}); err == nil && lapsedAt.Load() == 0 && obs.Lapsed(l, now, d) {
				lapsedAt.Store(now.UnixNano())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	go func() {
		for ctx.Err() == nil && (lapsedAt.Load() == 0 || stoppedAt.Load() == 0) {
			if l, err := leases.Get(ctx, member.LeaseName("w-0"), metav1.GetOptions{}); err == nil {
				obs.Observe(l, time.Now())
			}
			if cut.Load() {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	time.Sleep(2 * timing.Retry) // a few renewals seen
	cut.Store(true)
	cutAt := time.Now()
	watch()
	if stoppedAt.Load() == 0 || lapsedAt.Load() == 0 {
		t.Fatalf("%s after the cut: jobs stopped %v, Lease lapsed %v; want both", 3*d, stoppedAt.Load() != 0, lapsedAt.Load() != 0)
	}
	stopped, lapsed := time.Unix(0, stoppedAt.Load()), time.Unix(0, lapsedAt.Load())
	t.Logf("cut off at 0; jobs stopped at %.2f s; the Lease lapsed for the controller at %.2f s (duration %s, renew deadline %s)",
		stopped.Sub(cutAt).Seconds(), lapsed.Sub(cutAt).Seconds(), timing.Duration, timing.RenewDeadline)
	if !stopped.Before(lapsed) {
		t.Fatalf("the worker stopped its jobs %s after the controller could give them away", stopped.Sub(lapsed))
	}
	if margin := lapsed.Sub(stopped); margin < (timing.Duration-timing.RenewDeadline)/2 {
		t.Errorf("only %s between the stop and the lapse, want about %s", margin, timing.Duration-timing.RenewDeadline)
	}
	cut.Store(false)
	waitUntil(t, "the jobs running again once the Lease is renewed", func() bool { return read(out) == "cam-1\ncam-2\n" })
}

// holeTransport black-holes every request while hole is set: it hangs
// until its context ends, as a request does over a partition that drops
// packets (no error comes back).
type holeTransport struct {
	hole *atomic.Bool
	next http.RoundTripper
}

func (h holeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if h.hole.Load() {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	return h.next.RoundTrip(r)
}

// A worker whose report hangs (the partition drops packets: no error comes
// back) still stops its jobs when its tenure ends, before the Lease may
// lapse for the controller (Duration after the last renewal it saw, which
// came at most a RetryPeriod before the cut): the report is bounded by the
// tenure, so the loop is free to fence.
func TestWorkerStopsWhileAReportHangs(t *testing.T) {
	e := testenv.Need(t, env)
	kc := kubernetes.NewForConfigOrDie(e.Config)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := fmt.Sprintf("hole-%d", time.Now().UnixNano()%1e9)
	createPodNamespace(ctx, t, kc, ns)
	const d = 9 * time.Second
	timing := member.TimingOf(d)
	var hole atomic.Bool
	cfg := rest.CopyConfig(e.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return holeTransport{hole: &hole, next: rt} })
	dir, out := t.TempDir(), filepath.Join(t.TempDir(), "jobs")
	mount(t, dir, shareOf([]string{"cam-1", "cam-2"}, 1))
	done := make(chan error, 1)
	wctx, stop := context.WithCancel(ctx)
	go func() {
		done <- Run(wctx, Options{ConfigFile: filepath.Join(dir, swarmv1.ConfigMapKey), PodName: "w-0", Namespace: ns,
			Out: out, Config: cfg, LeaseDuration: d, Poll: time.Hour})
	}()
	defer func() { hole.Store(false); stop(); <-done }()
	waitUntil(t, "version 1 running and reported", func() bool { return read(out) == "cam-1\ncam-2\n" && annotation(ctx, kc, ns) == "1" })

	hole.Store(true)
	cutAt := time.Now()
	mount(t, dir, shareOf([]string{"cam-3"}, 2)) // applied, then its report hangs
	waitUntil(t, "version 2 running", func() bool { return read(out) == "cam-3\n" })
	waitUntil(t, "the jobs stopped", func() bool { return read(out) == "" })
	stopped := time.Since(cutAt)
	t.Logf("partitioned at 0 (requests hang); jobs stopped at %.2f s; the Lease may lapse from %.2f s", stopped.Seconds(), (timing.Duration - timing.Retry).Seconds())
	if stopped >= timing.Duration-timing.Retry {
		t.Fatalf("the jobs stopped %s after the partition: the controller may have given them away already", stopped)
	}
}

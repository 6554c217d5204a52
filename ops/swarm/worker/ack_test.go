package worker

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/jobsfile"
	"slipway.dev/slipway/ops/swarm/member"
	"slipway.dev/slipway/ops/testenv"
)

// TestAckHoldsTheHandover: with --ack, a share that takes jobs away is
// reported (the controller's cue to give them to others) only once the
// application acknowledged that share's version, and a stopping worker
// releases its Lease only once the application acknowledged it stopped
// everything (0). Before, both followed the worker's own file write.
func TestAckHoldsTheHandover(t *testing.T) {
	e := testenv.Need(t, env)
	kc := kubernetes.NewForConfigOrDie(e.Config)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := fmt.Sprintf("ack-%d", time.Now().UnixNano()%1e9)
	createPodNamespace(ctx, t, kc, ns)
	dir, out := t.TempDir(), filepath.Join(t.TempDir(), "jobs")
	ack := filepath.Join(filepath.Dir(out), "jobs.ack")
	mount(t, dir, shareOf([]string{"cam-1", "cam-2"}, 1))
	done := make(chan error, 1)
	wctx, stop := context.WithCancel(ctx)
	go func() {
		done <- Run(wctx, Options{ConfigFile: filepath.Join(dir, swarmv1.ConfigMapKey), PodName: "w-0", Namespace: ns,
			Out: out, Ack: ack, Config: e.Config, LeaseDuration: 3 * time.Second, Poll: time.Hour})
	}()
	stopped := false
	defer func() {
		if !stopped {
			stop()
			<-done
		}
	}()
	waitUntil(t, "version 1 written", func() bool { f, _ := jobsfile.Read(out); return f.Version == 1 && len(f.Jobs) == 2 })
	hold(t, "version 1 reported before the application acknowledged it", 500*time.Millisecond, func() bool { return annotation(ctx, kc, ns) == "1" })
	if err := jobsfile.WriteAck(ack, 1); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "version 1 reported once acknowledged", func() bool { return annotation(ctx, kc, ns) == "1" })

	mount(t, dir, shareOf([]string{"cam-2"}, 2)) // cam-1 taken away
	waitUntil(t, "version 2 written", func() bool { f, _ := jobsfile.Read(out); return f.Version == 2 })
	hold(t, "version 2 reported while the application still runs cam-1", 500*time.Millisecond, func() bool { return annotation(ctx, kc, ns) == "2" })
	if err := jobsfile.WriteAck(ack, 2); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "version 2 reported once acknowledged", func() bool { return annotation(ctx, kc, ns) == "2" })

	stop() // SIGTERM: the jobs file is emptied, the Lease kept until the application stopped
	waitUntil(t, "the jobs file emptied", func() bool { f, _ := jobsfile.Read(out); return f.Version == 0 && len(f.Jobs) == 0 })
	hold(t, "the Lease released before the application acknowledged its stop", time.Second, func() bool { return leaseReleased(ctx, kc, ns) })
	if err := jobsfile.WriteAck(ack, 0); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stopped = true
	if !leaseReleased(ctx, kc, ns) {
		t.Fatal("the Lease was not released once the application acknowledged its stop")
	}
}

// hold fails if cond becomes true within d.
func hold(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			t.Fatal(what)
		}
	}
}

func leaseReleased(ctx context.Context, kc kubernetes.Interface, ns string) bool {
	l, err := kc.CoordinationV1().Leases(ns).Get(ctx, member.LeaseName("w-0"), metav1.GetOptions{})
	return err == nil && member.Released(l)
}

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
	"slipway.dev/slipway/ops/swarm/member"
	"slipway.dev/slipway/ops/testenv"
)

// TestStaleMountStopsAtTheFence: the controller fences a worker (writes
// min-config-version on its Lease, as before it hands the worker's jobs to
// others) while the worker still holds its Lease and its mount lags
// behind. The worker sees the fence on its next renewal and stops the
// jobs of the stale mount; they run again once the mount catches up.
// Before, the fence was read only when the Lease was taken again, and a
// stale mount only logged.
func TestStaleMountStopsAtTheFence(t *testing.T) {
	e := testenv.Need(t, env)
	kc := kubernetes.NewForConfigOrDie(e.Config)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := fmt.Sprintf("stale-%d", time.Now().UnixNano()%1e9)
	createPodNamespace(ctx, t, kc, ns)
	dir, out := t.TempDir(), filepath.Join(t.TempDir(), "jobs")
	mount(t, dir, shareOf([]string{"cam-1", "cam-2"}, 1))
	done := make(chan error, 1)
	wctx, stop := context.WithCancel(ctx)
	go func() {
		done <- Run(wctx, Options{ConfigFile: filepath.Join(dir, swarmv1.ConfigMapKey), PodName: "w-0", PodUID: "uid-0", Namespace: ns,
			Out: out, Config: e.Config, LeaseDuration: 3 * time.Second, Poll: time.Hour})
	}()
	defer func() { stop(); <-done }()
	waitUntil(t, "version 1 running", func() bool { return read(out) == "cam-1\ncam-2\n" })

	api := kc.CoordinationV1().Leases(ns)
	for {
		l, err := api.Get(ctx, member.LeaseName("w-0"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err = api.Update(ctx, member.WithMinVersion(l, 3), metav1.UpdateOptions{}); err == nil {
			break
		}
	}
	fenced := time.Now()
	waitUntil(t, "the stale mount's jobs stopped", func() bool { return read(out) == "" })
	t.Logf("stopped %.2f s after the fence was written (renewal every 0.6 s)", time.Since(fenced).Seconds())
	mount(t, dir, shareOf([]string{"cam-2"}, 3))
	waitUntil(t, "the caught-up share running", func() bool { return read(out) == "cam-2\n" })
}

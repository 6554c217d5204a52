package controller

import (
	"net/http"
	"sync"
	"testing"
	"time"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
)

// TestWedgedLoopFailsHealthz: /healthz says whether the work loop turns,
// /readyz whether the caches are filled. A replica that is not the leader
// stays healthy (its loop turns, idle); the leader's loop wedged in a sync
// (blocked on the controller's lock) turns its /healthz red within
// StallAfter while /readyz stays green, and green again once it moves.
func TestWedgedLoopFailsHealthz(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, true)
	p.stopCtrl()
	p.stall = 2 * time.Second
	p.ctrl, p.stopCtrl = p.startController("probed")
	p.statefulSet(2)
	p.createSwarm(swarmv1.SwarmSpec{Jobs: jobNames(0, 4), Refresh: swarmv1.RefreshReload})
	p.converged(2)
	standby, stopStandby := p.startController("standby")
	defer stopStandby()
	for standby.Addr() == "" {
		time.Sleep(50 * time.Millisecond)
	}
	leader := "http://" + p.ctrl.Addr()
	p.waitHTTP(leader+"/healthz", http.StatusOK)
	p.waitHTTP(leader+"/readyz", http.StatusOK)
	time.Sleep(2 * p.stall) // longer than the allowance: an idle loop still beats
	if standby.Leading() {
		t.Fatal("the standby replica leads")
	}
	p.waitHTTP("http://"+standby.Addr()+"/healthz", http.StatusOK)

	p.ctrl.mu.Lock() // the next sync blocks here
	unlock := sync.OnceFunc(p.ctrl.mu.Unlock)
	defer unlock() // before the cleanups, which wait for the loop
	p.jobsEdited(jobNames(0, 5))
	p.waitHTTP(leader+"/healthz", http.StatusServiceUnavailable)
	p.waitHTTP(leader+"/readyz", http.StatusOK)
	unlock()
	p.waitHTTP(leader+"/healthz", http.StatusOK)
	p.converged(2)
}

// waitHTTP polls url until it answers code, or fails after 30 s.
func (p *pool) waitHTTP(url string, code int) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	got := 0
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			got = resp.StatusCode
			resp.Body.Close()
			if got == code {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.t.Fatalf("%s answered %d, want %d", url, got, code)
}

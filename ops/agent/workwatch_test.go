package agent

import (
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
)

func TestNextWorkWatch(t *testing.T) {
	idle := WorkWatchState{Open: true, Synced: true, NodeSettled: true, Idle: time.Minute, Linger: time.Minute}
	for _, c := range []struct {
		name string
		edit func(*WorkWatchState)
		want WorkWatchStep
	}{
		{"closed already", func(s *WorkWatchState) { s.Open = false }, WorkWatchNone},
		{"no work, no Job, the linger over", func(*WorkWatchState) {}, WorkWatchClose},
		{"the caches not filled yet: they tell nothing of the Jobs", func(s *WorkWatchState) { s.Synced = false }, WorkWatchKeep},
		{"a sync holds them", func(s *WorkWatchState) { s.Users = 1 }, WorkWatchKeep},
		{"the node has work", func(s *WorkWatchState) { s.Needed = true }, WorkWatchKeep},
		{"a Job of the node runs", func(s *WorkWatchState) { s.JobsRunning = true }, WorkWatchKeep},
		{"the Node asks something of a reader without the hold (a cordon of slipway's, versions to publish)", func(s *WorkWatchState) { s.NodeSettled = false }, WorkWatchKeep},
		{"a sync held them since the Jobs were read", func(s *WorkWatchState) { s.HeldMeanwhile = true }, WorkWatchKeep},
		{"within the linger", func(s *WorkWatchState) { s.Idle = time.Minute - time.Second }, WorkWatchKeep},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := idle
			c.edit(&s)
			if got := nextWorkWatch(s); got != c.want {
				t.Errorf("nextWorkWatch(%+v) = %v, want %v", s, got, c.want)
			}
		})
	}
}

// TestIdleAgentClosesItsWorkWatches: an agent whose node has no work
// closes its watches of its Node, the node's Jobs and their pods after the
// linger, and keeps its NodeUpdate's; a channel that moves its node opens
// them again (the NodeUpdate's event), and the node upgrades; once it is
// done they close again. The agent's own requests are counted, as its
// client sends them.
func TestIdleAgentClosesItsWorkWatches(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var procs []*fleettest.WatchCounter // one per agent process: the reboot starts another
	f := newFleet(t, 1, func(o *Options) {
		o.WorkWatchLinger = 2 * time.Second
		if o.Config != nil {
			w := fleettest.NewWatchCounter()
			mu.Lock()
			procs = append(procs, w)
			mu.Unlock()
			o.Config = rest.CopyConfig(o.Config)
			o.Config.Wrap(w.Wrap)
		}
	})
	proc := func(i int) *fleettest.WatchCounter { // i < 0: the latest
		mu.Lock()
		defer mu.Unlock()
		if i < 0 {
			i = len(procs) - 1
		}
		return procs[i]
	}
	node := f.NS + "-n0"
	f.Start(node)
	f.AgentsUp(node)
	closed := func() bool {
		open, _ := proc(-1).Counts()
		return open["nodes"] == 0 && open["jobs"] == 0 && open["pods"] == 0 && open["nodeupdates"] == 1
	}
	waitUntil(t, 30*time.Second, "the idle agent's Node, Job and pod watches closed, its NodeUpdate's open", closed)
	idle := proc(-1)
	idle.ResetMax()
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	f.WaitFor("at v2", 2*time.Minute, fleettest.Done(1))
	// The process that had closed them opened them again for the slot,
	// before its reboot started the next (which opens them at start).
	if _, most := idle.Counts(); most["nodes"] == 0 || most["jobs"] == 0 || most["pods"] == 0 {
		t.Errorf("the node upgraded, but the idle agent never watched its Node, Jobs and pods again (most open at once: %v)", most)
	}
	waitUntil(t, 30*time.Second, "the Node, Job and pod watches closed again after the rollout", closed)
}

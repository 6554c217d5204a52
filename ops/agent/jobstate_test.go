package agent

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// A slot's Job this process has just created is running while its cache
// does not show it yet: the turn the agent's own phase write starts must
// not create it again (in a 100-node staged rollout 7 of 200 slots sent a
// second create, refused as existing, on the slot's critical path). Once
// the moment is past, a Job missing from the cache is missing.
func TestJobJustCreatedIsRunning(t *testing.T) {
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "uid-1"}}
	slot := v1.Slot{Node: "n1", Version: "v2", Attempt: 1, Since: metav1.NewTime(time.Unix(1700000000, 0))}
	name := protocol.SlotJobName(ch.UID, slot)
	for _, c := range []struct {
		name    string
		created time.Duration // how long ago this process created it; 0: it did not
		cached  bool
		want    plan.JobState
	}{
		{"never created, not cached", 0, false, plan.JobNone},
		{"created a moment ago, not cached yet", time.Second, false, plan.JobRunning},
		{"created long ago, gone from the cache", createdLag + time.Second, false, plan.JobNone},
		{"cached and running", time.Second, true, plan.JobRunning},
	} {
		t.Run(c.name, func(t *testing.T) {
			jobs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			w := closedWork("n1")
			w.jobs.Indexer, w.open = jobs, true
			a := &Agent{opts: Options{NodeName: "n1", Namespace: "ns"}, watches: w, created: map[string]time.Time{}}
			if c.created > 0 {
				a.created[name] = time.Now().Add(-c.created)
			}
			if c.cached {
				j := a.buildJob(ch, plan.Settings{}, slot)
				j.Namespace = "ns"
				if err := jobs.Add(j); err != nil {
					t.Fatal(err)
				}
			}
			if got := a.jobState(&stepCtx{ch: ch, slot: slot}); got != c.want {
				t.Errorf("jobState = %v, want %v", got, c.want)
			}
		})
	}
}

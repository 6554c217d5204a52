package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/protocol"
)

// sampler reads the channel and the nodes every half second and records
// what must never happen, and every failure it saw.
type sampler struct {
	mu                  sync.Mutex
	samples             int
	maxSlots, maxCordon int
	over                []string
	failures            map[string]v1.Failure // node -> the latest failure at chaosVersion seen
}

func sample(ctx context.Context, t *testing.T, c clients) *sampler {
	s := &sampler{failures: map[string]v1.Failure{}}
	go func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := s.take(ctx, c); err != nil && ctx.Err() == nil {
				t.Logf("sample: %v", err)
			}
		}
	}()
	return s
}

// take is one sample: slots held, nodes cordoned by slipway, failures.
func (s *sampler) take(ctx context.Context, c clients) error {
	ch, err := c.ops.OpsV1().UpdateChannels(ns).Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		return err
	}
	nl, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var cordoned []string
	for _, n := range nl.Items {
		if drain.CordonedBy(n.Annotations) == protocol.CordonOwner {
			cordoned = append(cordoned, n.Name)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	s.maxSlots, s.maxCordon = max(s.maxSlots, len(ch.Status.Updating)), max(s.maxCordon, len(cordoned))
	if len(ch.Status.Updating) > concurrency || len(cordoned) > concurrency {
		var slots []string
		for _, u := range ch.Status.Updating {
			slots = append(slots, u.Node+"/"+u.Phase)
		}
		s.over = append(s.over, fmt.Sprintf("%s: slots %v, cordoned by slipway %v", time.Now().Format("15:04:05.000"), slots, cordoned))
	}
	for _, f := range ch.Status.Failed {
		if f.Version == chaosVersion {
			s.failures[f.Node] = f
		}
	}
	return nil
}

// check fails t for every sample over the concurrency, and when sampling
// did not see the rollout.
func (s *sampler) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("%d samples: at most %d slots held and %d nodes cordoned by slipway (concurrency %d); %d nodes failed",
		s.samples, s.maxSlots, s.maxCordon, concurrency, len(s.failures))
	for _, o := range s.over {
		t.Errorf("over concurrency %d at %s", concurrency, o)
	}
	if s.maxSlots == 0 {
		t.Error("no sample saw a slot: the sampling missed the rollout")
	}
}

// checkFailuresKept fails t for a failure sampled during the rollout that
// the final status no longer counts (none of these nodes reached the
// target: their retry backoff outlasts the test).
func (s *sampler) checkFailuresKept(t *testing.T, ch *v1.UpdateChannel) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for node, seen := range s.failures {
		kept := false
		for _, f := range ch.Status.Failed {
			kept = kept || f.Node == node && f.Version == seen.Version && f.Attempts >= seen.Attempts
		}
		if !kept {
			t.Errorf("the failure of %s (%s, attempt %d: %s) was pruned", node, seen.Version, seen.Attempts, seen.Reason)
		}
	}
}

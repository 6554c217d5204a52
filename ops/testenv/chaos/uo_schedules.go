package chaos

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/testenv/faults"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// The update operator's named schedules of a write whose answer is lost:
// the API server applied it, the controller saw only an error.

func init() { maps.Copy(Schedules, uoSchedules) }

// uoLostNamed are the schedules run by TestUpdateOperatorLostWrites.
var uoLostNamed = []string{"uo-lost-cordon-answer"}

// variantLostCordon is the update operator's variant that drops the
// controllers' connections the moment the first cordon with perform-update
// lands (uoLostCordon).
const variantLostCordon = "lost-cordon-answer"

// uoLostLatency delays every chunk between a controller and the API
// server in uo-lost-cordon-answer: the answer to the cordon is still in
// the controller's proxy when the variant, watching the API server
// directly, sees the cordon and drops the connections (and ends the
// latency: the leader reconnects at once and keeps its Lease, as after a
// plain drop).
const uoLostLatency = 150 * time.Millisecond

var uoSchedules = map[string]Named{
	// Both controllers' API traffic 150 ms late from the rollout's start;
	// the variant drops their connections the moment the first node's
	// cordon with perform-update lands, so its answer never comes back,
	// and ends the latency there (the leader keeps its Lease). Before the fix the controller put its record back as if the
	// cordon had not been written, failed the update (reset-state while
	// the agent performed) and never lifted the cordon it did not know it
	// held: update-operator-max-in-flight 3>2 as two more nodes started,
	// the node left cordoned. Seen first as seed 1 of
	// TestUpdateOperatorSeeds (a drop of the leader's connections).
	"uo-lost-cordon-answer": {System: "update-operator", Nodes: 5, Variant: variantLostCordon,
		Doc: "the answer to the controller's cordon with perform-update is lost: the cordon is known held, lifted, and counted in flight (update-operator-max-in-flight, no cordon left)",
		Schedule: faults.Schedule{
			{At: 0, Kind: faults.Latency, Target: "controller/a", For: 40 * time.Second, Arg: uoLostLatency},
			{At: 0, Kind: faults.Latency, Target: "controller/b", For: 40 * time.Second, Arg: uoLostLatency},
		}},
}

// startVariant starts the update operator's variants that strike at a
// step of the rollout rather than at an offset.
func (s *updateOperator) startVariant(ctx context.Context, h *harness) (stop func(), err error) {
	if s.variant != variantLostCordon {
		return func() {}, nil
	}
	vctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.lostCordon(vctx, h)
	}()
	return func() { cancel(); <-done }, nil
}

// lostCordon watches the Nodes (directly, not through a proxy) and drops
// both controllers' connections the moment a node first shows the
// operator's cordon with perform-update wanted: the write's answer, held
// uoLostLatency in the proxy, is lost.
func (s *updateOperator) lostCordon(ctx context.Context, h *harness) {
	w, err := s.kc.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		h.logf("variant: watch nodes: %v", err)
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type != watch.Modified && ev.Type != watch.Added {
			continue
		}
		n, ok := ev.Object.(*corev1.Node)
		if !ok || !n.Spec.Unschedulable || drain.CordonedBy(n.Annotations) != s.keys.CordonOwner() ||
			n.Annotations[s.keys.Wanted()] != string(uo.IntentPerform) {
			continue
		}
		for _, c := range controllers {
			h.proxies[c].Drop()
			h.proxies[c].SetLatency(0) // the answer held is lost all the same; the leader keeps its Lease
		}
		h.logf("variant: %s cordoned with perform-update (resourceVersion %s): the controllers' connections dropped, the answer lost; their latency ended", n.Name, n.ResourceVersion)
		return
	}
}

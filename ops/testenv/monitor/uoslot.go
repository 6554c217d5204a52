package monitor

import (
	"fmt"
	"time"
)

// InvOperatorNotReadySlot is the update operator's rule that no slot is
// held for ever by a node that went down.
const InvOperatorNotReadySlot = "update-operator-notready-slot"

// defaultSlotGrace is how long past the operator's state timeout a NotReady
// node may still hold its slot: the controller's next look, under load.
const defaultSlotGrace = 15 * time.Second

// OperatorNotReadySlot: a node the update operator counts in flight that
// has been NotReady, at one intent, for longer than
// Limits.OperatorStateTimeout (plus Limits.SlotGrace) holds a slot it can
// never give back by itself: the controller must end its update (a
// failure with a reason) so that the slot goes to the next node. Each
// intent's time counts from when the monitor saw it wanted (every intent
// is bounded by --state-timeout on its own), or from the node going
// NotReady, whichever came last. 0: not checked.
func OperatorNotReadySlot(s State, l Limits) ([]Finding, error) {
	if l.OperatorStateTimeout <= 0 {
		return nil, nil
	}
	l = l.withDefaults()
	var out []Finding
	for _, n := range sortedNodes(s) {
		if !n.InFlight || n.Ready || n.NotReadySince.IsZero() {
			continue
		}
		since := n.NotReadySince
		if n.WantedSince.After(since) {
			since = n.WantedSince
		}
		held := s.Now.Sub(since)
		if held <= l.OperatorStateTimeout+l.SlotGrace {
			continue
		}
		out = append(out, Finding{Invariant: InvOperatorNotReadySlot, Key: n.Name,
			Message: fmt.Sprintf("node %s has held an update slot while NotReady for %s at %s (agent %s at %s, version %q, target %q): past --state-timeout %s, the update should have failed and freed the slot",
				n.Name, held.Round(time.Second), orNone(string(n.Operator.Wanted)), orNone(string(n.Operator.State)), orNone(string(n.Operator.Active)),
				n.Operator.Current, n.Operator.Target, l.OperatorStateTimeout),
			Objects: []string{nodeKey(n.Name)}})
	}
	return out, nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

package updateoperator

import (
	"context"
	"encoding/json"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/drain"
)

// A write of the controller's record (record.go) that returns an error
// may have been applied, as a Node write may (lostwrite.go): the
// connection dropped after the request went out, or the controller's own
// context ended (its Lease lost, its process stopping) while the request
// was on its way. Before, the controller then kept its copy as it was and
// skipped the Node write the record stood for, while the ConfigMap, which
// the next leader loads, held the write. The record write that lifts a
// cordon (the uncordon's) was the harmful one: a new leader found the
// cordon gone from the record while the Node still carried it, took it
// for someone else's, never lifted it, and counted the node out of flight
// while the Node said in flight (a node left cordoned for good, one node
// more than max-concurrent once the next one started). One that adds an
// intent could be restored on its Node by a new leader after the old
// leader, not knowing of it, had started another node in its place.
//
// So an error that is not the API server's refusal is judged by reading
// the ConfigMap back (without the controller's own cancellation): carried,
// the write is taken as made and the Node write goes on; refused, the
// controller's copy stays as it was. Not carried (it may land still) or
// unreadable, the ConfigMap may hold either record: the controller keeps
// the written one unless it lets go of the slot or the cordon the old one
// holds (an uncordon, a finish: then the old one), writes nothing on the
// Node for it, and sends its copy again before the node's next write (at
// the latest at the start of the next turn), so that the ConfigMap never
// holds a record the Node write did not follow for longer than a turn.

// RecordCarries reports whether data, a fleet state ConfigMap's, holds r
// as node's record (r empty: no record of node).
func RecordCarries(data map[string]string, node string, r map[string]string) bool {
	v, ok := data[nodeRecordPrefix+node]
	if len(r) == 0 {
		return !ok
	}
	if !ok {
		return false
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(v), &got); err != nil {
		return false
	}
	return maps.Equal(got, r)
}

// RecordHolds reports whether a node's record r takes one of the
// max-concurrent slots (InFlight over the record's own keys, as the
// controller decides from it) and whether it holds this prefix's cordon.
func (k Keys) RecordHolds(r map[string]string) (slot, cordon bool) {
	wanted, err := ParseIntent(r[k.Wanted()])
	v := NodeView{Wanted: wanted, WantedInvalid: err != nil, Active: IntentUnknown,
		Ahead: r[k.Key(KeyAhead)] == "true", CordonedByUs: k.cordonedByUs(r)}
	return InFlight(v), v.CordonedByUs
}

// RecordLetsGo reports whether node record next lets go of the slot or
// the cordon that old holds (an uncordon, a finish, a failure), the
// cordon aside too: an uncordon's first record write keeps the cordon,
// which holds the slot, until the Node's uncordon is known (uncordon.go),
// but the finish or the failure written beside it lets go of the slot the
// intent holds.
func (k Keys) RecordLetsGo(old, next map[string]string) bool {
	oldSlot, oldCordon := k.RecordHolds(old)
	nextSlot, nextCordon := k.RecordHolds(next)
	if oldSlot && !nextSlot || oldCordon && !nextCordon {
		return true
	}
	oldSlot, _ = k.RecordHolds(withoutCordon(old))
	nextSlot, _ = k.RecordHolds(withoutCordon(next))
	return oldSlot && !nextSlot
}

// withoutCordon is a node's record r without the cordon's record.
func withoutCordon(r map[string]string) map[string]string {
	r = maps.Clone(r)
	delete(r, drain.AnnotationCordonedBy)
	delete(r, drain.AnnotationSchedulableBefore)
	return r
}

// RecordAfterWrite is what the controller does with a record write of
// fate that returned an error (JudgeWrite over the ConfigMap read back),
// letsGo whether the record written lets go of a slot or a cordon the one
// it replaces holds: keepNext, its copy becomes the one written; made, the
// write counts as made and the Node write it stands for goes on. Landed:
// the one written, made. Refused: the old one, not made. Not seen or
// unknown (the ConfigMap may hold either, now or later): not made, and
// the one written unless it lets go (an uncordon, a finish, a failure
// keep the cordon and the slot until they are written for sure).
func RecordAfterWrite(fate WriteFate, letsGo bool) (keepNext, made bool) {
	switch fate {
	case WriteLanded:
		return true, true
	case WriteRefused:
		return false, false
	}
	return !letsGo, false
}

// judgeRecordWrite judges a write of node's record next (replacing old)
// that returned werr, by reading the ConfigMap back unless the API server
// refused it, and keeps in the controller's copy what RecordAfterWrite
// says (letsGo: Keys.RecordLetsGo; nil, never); it returns nil when the
// write counts as made. Called with wmu held.
func (s *fleetState) judgeRecordWrite(ctx context.Context, node string, old, next map[string]string, letsGo func(old, next map[string]string) bool, werr error) error {
	fate := WriteRefused
	if !Refused(werr) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readBackTimeout)
		cm, rerr := s.kube.CoreV1().ConfigMaps(s.namespace).Get(rctx, s.name, metav1.GetOptions{})
		cancel()
		fate = JudgeWrite(werr, rerr, rerr == nil && RecordCarries(cm.Data, node, next))
	}
	keepNext, made := RecordAfterWrite(fate, letsGo != nil && letsGo(old, next))
	s.mu.Lock()
	if keepNext {
		s.setRecord(node, next)
	}
	if s.unsure == nil {
		s.unsure = map[string]bool{}
	}
	if fate == WriteNotLanded || fate == WriteUnknown {
		s.unsure[node] = true // the ConfigMap's copy is not known: sent again
	}
	s.mu.Unlock()
	switch {
	case made:
		s.log("a write of the controller's record lost its answer, but the ConfigMap carries it: taken as written", node, werr)
		return nil
	case fate != WriteRefused:
		s.log("a write of the controller's record lost its answer and the ConfigMap does not show it ("+fate.String()+"): the record that holds the node's slot or cordon is kept, and sent again", node, werr)
	}
	return werr
}

// setRecord sets node's record in the controller's copy (empty: none).
// Called with mu held.
func (s *fleetState) setRecord(node string, r map[string]string) {
	if len(r) == 0 {
		delete(s.nodes, node)
	} else {
		s.nodes[node] = r
	}
}

// isUnsure reports whether the ConfigMap's copy of node's record is not
// known to be the controller's (a write of it lost its answer).
func (s *fleetState) isUnsure(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unsure[node]
}

// resend writes the controller's copy of node's record again, when a
// write of it lost its answer.
func (s *fleetState) resend(ctx context.Context, node string, letsGo func(old, next map[string]string) bool) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if !s.isUnsure(node) {
		return nil
	}
	r := s.nodeRecord(node)
	return s.writeNode(ctx, node, r, r, letsGo)
}

package updateoperator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/internal/wallclock"
)

// The controller's record. Every key the controller writes on a Node and
// decides from (the intent wanted, the clock its timeouts count from, the
// target, the failures and their time, prepared-ahead, the drain's start
// and workloads, its own cordon) can be written on that Node by the node
// too: by its agent where a policy allows, and by its kubelet, which may
// write any annotation of its own Node. A forged intent or a clock set to
// 2999 would hold one of the fleet's max-concurrent slots for ever. So
// the controller keeps its own copy of those keys, in the fleet state's
// ConfigMap that only it writes (one data key per Node, "node.<name>"),
// written before the Node in each of its writes (an uncordon drops the
// cordon from it only after, uncordon.go), and decides from the copy
// alone; the Node's copy is the message to the agent (and to
// people). A Node whose copy differs is written back to the record (a
// Warning Event says so). A record value that cannot be read (only the
// one-time import can bring one) is replaced by the Node's, so that an
// admin's fix of a held node works as before. A write of the record
// whose answer is lost is read back before the Node write it stands for
// (record_lost.go).
//
// The record starts as the Nodes' own annotations once, when a
// controller first finds none (a cluster upgraded from a version without
// it, or a fresh one), with every time clamped to now.

// nodeRecordPrefix and recordsMarker are the record's data keys in the
// fleet state's ConfigMap; recordUID, in a node's record, is the UID of
// the Node it is of (no annotation key can hold "#"): a Node deleted and
// made again under the same name is a new node, with an empty record.
const (
	nodeRecordPrefix = "node."
	recordsMarker    = "records"
	recordUID        = "#uid"
)

// recordSuffixes are the controller's keys (under the prefix) kept in
// the record: ControllerAnnotations but the reason, which the agent
// writes too and nothing is decided from.
func recordSuffixes() []string {
	var out []string
	for _, k := range ControllerAnnotations {
		if k != KeyReason {
			out = append(out, k)
		}
	}
	return out
}

// recordKeys are the full keys of the record: recordSuffixes under the
// prefix, and the cordon's record (drain.AnnotationCordonedBy,
// drain.AnnotationSchedulableBefore) while the cordon is this prefix's.
func (k Keys) recordKeys() []string {
	return append(k.full(recordSuffixes()), drain.AnnotationCordonedBy, drain.AnnotationSchedulableBefore)
}

// RecordValueValid reports whether value is readable for the record key
// suffix (a full key's part after the prefix).
func RecordValueValid(suffix, value string) bool {
	if value == "" {
		return true
	}
	switch suffix {
	case KeyActionWanted:
		_, err := ParseIntent(value)
		return err == nil
	case KeyFailures:
		n, err := strconv.Atoi(value)
		return err == nil && n >= 0
	case KeyLastFailure, KeyTransition, KeyFinished, KeyDrainStarted:
		_, err := time.Parse(time.RFC3339, value)
		return err == nil
	}
	return true
}

// ImportRecord is the record taken from a Node's annotations a (the
// one-time import): its controller keys, times clamped to now (a node may
// have written them), the cordon's record only when it is this prefix's.
func (k Keys) ImportRecord(a map[string]string, now time.Time) map[string]string {
	r := map[string]string{}
	for _, s := range recordSuffixes() {
		// trust: uo.node.import
		v, ok := a[k.Key(s)]
		if !ok {
			continue
		}
		switch s {
		case KeyLastFailure, KeyTransition, KeyFinished, KeyDrainStarted:
			if t, err := time.Parse(time.RFC3339, v); err == nil {
				v = stamp(clampNow(t, now))
			}
		}
		r[k.Key(s)] = v
	}
	// trust: uo.node.cordon-record
	if k.cordonedByUs(a) {
		r[drain.AnnotationCordonedBy] = a[drain.AnnotationCordonedBy]
		if v, ok := a[drain.AnnotationSchedulableBefore]; ok {
			r[drain.AnnotationSchedulableBefore] = v
		}
	}
	return r
}

// Overlay is a copy of n whose record keys are the record's r: a key r
// lacks is absent, whatever the Node says. The cordon's record of another
// owner (another prefix's, the k3os agent's, an admin's none) is the
// Node's: the record holds only this prefix's.
func (k Keys) Overlay(n *corev1.Node, r map[string]string) *corev1.Node {
	out := n.DeepCopy()
	a := maps.Clone(n.Annotations)
	if a == nil {
		a = map[string]string{}
	}
	for _, s := range recordSuffixes() {
		delete(a, k.Key(s))
	}
	// trust: uo.node.cordon-record
	if k.cordonedByUs(n.Annotations) || r[drain.AnnotationCordonedBy] != "" {
		delete(a, drain.AnnotationCordonedBy)
		delete(a, drain.AnnotationSchedulableBefore)
	}
	for key, v := range r {
		if key != recordUID {
			a[key] = v
		}
	}
	out.Annotations = a
	return out
}

// Drift lists the record keys (drain's cordon record apart: it comes with
// the spec's cordon) whose value on the Node a differs from the record r,
// and the fixes: a record value that cannot be read and that the Node has
// changed takes the Node's (an admin's fix), else the Node is to be
// written back to the record.
func (k Keys) Drift(a, r map[string]string) (fix map[string]any, restore map[string]any) {
	for _, s := range recordSuffixes() {
		key := k.Key(s)
		// trust: uo.node.controller-keys
		nv, nok := a[key]
		rv, rok := r[key]
		if nv == rv && nok == rok {
			continue
		}
		if !RecordValueValid(s, rv) {
			if fix == nil {
				fix = map[string]any{}
			}
			fix[key] = nilIfAbsent(nv, nok)
			continue
		}
		if restore == nil {
			restore = map[string]any{}
		}
		restore[key] = nilIfAbsent(rv, rok)
	}
	return fix, restore
}

func nilIfAbsent(v string, ok bool) any {
	if !ok {
		return nil
	}
	return v
}

// nodeRecord returns a copy of node's record.
func (s *fleetState) nodeRecord(node string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.nodes[node])
}

func (s *fleetState) isLoaded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loaded
}

// imported reports whether the record exists (the one-time import was made).
func (s *fleetState) imported() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recorded
}

// importRecords writes the records of the Nodes and the marker, at once.
func (s *fleetState) importRecords(ctx context.Context, records map[string]map[string]string) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	data := map[string]any{recordsMarker: "1"}
	for node, r := range records {
		b, _ := json.Marshal(r)
		data[nodeRecordPrefix+node] = string(b)
	}
	if err := s.patchData(ctx, data); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for node, r := range records {
		s.nodes[node] = r
	}
	s.recorded = true
	return nil
}

// setNode changes the keys of node's record that are in keys (nil values
// remove) and writes it, before the Node write it stands for; undo puts
// the record back as it was, for a Node write that failed. letsGo says
// whether a record lets go of a slot or a cordon another holds
// (Keys.RecordLetsGo), for a write whose answer is lost (record_lost.go).
func (s *fleetState) setNode(ctx context.Context, node string, keys []string, changes map[string]any, letsGo func(old, next map[string]string) bool) (undo func(), err error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	old := s.nodes[node]
	s.mu.Unlock()
	next := maps.Clone(old)
	if next == nil {
		next = map[string]string{}
	}
	for _, k := range keys {
		v, ok := changes[k]
		if !ok {
			continue
		}
		if str, isStr := v.(string); isStr {
			next[k] = str
		} else {
			delete(next, k)
		}
	}
	if maps.Equal(old, next) && !s.isUnsure(node) {
		return func() {}, nil
	}
	if err := s.writeNode(ctx, node, old, next, letsGo); err != nil {
		return nil, err
	}
	return func() {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		if err := s.writeNode(context.WithoutCancel(ctx), node, next, old, letsGo); err != nil {
			s.log("put a node's record back after its Node write failed", node, err)
		}
	}, nil
}

// replaceNode replaces node's whole record with r.
func (s *fleetState) replaceNode(ctx context.Context, node string, r map[string]string) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.writeNode(ctx, node, s.nodeRecord(node), r, nil)
}

// writeNode writes node's record r (empty: removes it) in place of old;
// a write that returns an error is judged (record_lost.go). Called with
// wmu held.
func (s *fleetState) writeNode(ctx context.Context, node string, old, r map[string]string, letsGo func(old, next map[string]string) bool) error {
	var v any
	if len(r) > 0 {
		b, _ := json.Marshal(r)
		v = string(b)
	}
	if err := s.patchData(ctx, map[string]any{nodeRecordPrefix + node: v}); err != nil {
		return s.judgeRecordWrite(ctx, node, old, r, letsGo, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setRecord(node, r)
	delete(s.unsure, node)
	return nil
}

// forget removes the records of the Nodes no longer in the cluster.
func (s *fleetState) forget(ctx context.Context, present map[string]*corev1.Node) {
	s.mu.Lock()
	var gone []string
	for node := range s.nodes {
		if present[node] == nil {
			gone = append(gone, node)
		}
	}
	s.mu.Unlock()
	for _, node := range gone {
		s.wmu.Lock()
		if err := s.writeNode(ctx, node, s.nodeRecord(node), nil, nil); err != nil {
			s.log("forget the record of a deleted Node", node, err)
		}
		s.wmu.Unlock()
	}
}

func (s *fleetState) patchData(ctx context.Context, data map[string]any) error {
	patch, _ := json.Marshal(map[string]any{"data": data})
	if _, err := s.kube.CoreV1().ConfigMaps(s.namespace).Patch(ctx, s.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("write the controller's record (ConfigMap %s/%s): %w", s.namespace, s.name, err)
	}
	return nil
}

func (s *fleetState) log(what, node string, err error) {
	if s.logf != nil {
		s.logf(what, node, err)
	}
}

// parseRecords reads the node records of a fleet state ConfigMap's data.
func parseRecords(data map[string]string) (map[string]map[string]string, bool, error) {
	out := map[string]map[string]string{}
	for k, v := range data {
		node, ok := strings.CutPrefix(k, nodeRecordPrefix)
		if !ok {
			continue
		}
		var r map[string]string
		if err := json.Unmarshal([]byte(v), &r); err != nil {
			return nil, false, fmt.Errorf("the record of node %s (key %s) is not its JSON: %w", node, k, err)
		}
		out[node] = r
	}
	return out, data[recordsMarker] != "", nil
}

// recorded is n as the controller decides on it: its record keys the
// record's (Overlay).
func (c *controller) recorded(n *corev1.Node) *corev1.Node {
	if n == nil || !c.fleet.imported() {
		return n
	}
	return c.keys.Overlay(n, c.fleet.nodeRecord(n.Name))
}

// record writes to the record what a Node write of the controller
// changes (annotations: the write's; nil values remove), before that
// write; undo is for a write that failed.
func (c *controller) record(ctx context.Context, node string, annotations map[string]any) (undo func(), err error) {
	if !c.fleet.imported() {
		return func() {}, nil
	}
	return c.fleet.setNode(ctx, node, c.keys.recordKeys(), annotations, c.keys.RecordLetsGo)
}

// importRecords makes the one-time import from the Nodes, when the
// record does not exist yet.
func (c *controller) importRecords(ctx context.Context, nodes []corev1.Node) error {
	if c.fleet.imported() {
		return nil
	}
	if !c.fleet.isLoaded() { // a turn run outside lead (tests)
		if err := c.fleet.load(ctx); err != nil {
			return err
		}
		if c.fleet.imported() {
			return nil
		}
	}
	now := wallclock.Now()
	records := map[string]map[string]string{}
	for i := range nodes {
		r := c.keys.ImportRecord(nodes[i].Annotations, now)
		r[recordUID] = string(nodes[i].UID)
		records[nodes[i].Name] = r
	}
	if err := c.fleet.importRecords(ctx, records); err != nil {
		return err
	}
	c.o.Log.Info("the controller's record of its keys taken from the Nodes (once)", "nodes", len(records))
	return nil
}

// keepRecord compares n's copy of the record keys with the record: an
// unreadable record value the Node fixed is taken; any other difference
// is written back to the Node, said in a Warning Event. It returns n as
// decided on (recorded).
func (c *controller) keepRecord(ctx context.Context, n *corev1.Node) *corev1.Node {
	if !c.fleet.imported() {
		return n
	}
	if err := c.fleet.resend(ctx, n.Name, c.keys.RecordLetsGo); err != nil {
		c.o.Log.Error("send the controller's record again after a write whose answer was lost", "node", n.Name, "err", err)
	}
	if uid := c.fleet.nodeRecord(n.Name)[recordUID]; uid != string(n.UID) {
		// A Node new under this name (or a record from before UIDs): the
		// record is this Node's from now on, empty when it was another's.
		var err error
		if uid == "" {
			_, err = c.fleet.setNode(ctx, n.Name, []string{recordUID}, map[string]any{recordUID: string(n.UID)}, c.keys.RecordLetsGo)
		} else {
			err = c.fleet.replaceNode(ctx, n.Name, map[string]string{recordUID: string(n.UID)})
		}
		if err != nil {
			c.o.Log.Error("record a Node's UID", "node", n.Name, "err", err)
		}
	}
	fix, restore := c.keys.Drift(n.Annotations, c.fleet.nodeRecord(n.Name))
	if len(fix) > 0 {
		if _, err := c.fleet.setNode(ctx, n.Name, c.keys.recordKeys(), fix, c.keys.RecordLetsGo); err != nil {
			c.o.Log.Error("take a fixed value into the record", "node", n.Name, "err", err)
		}
	}
	if len(restore) > 0 && !c.isDraining(n.Name) {
		keys := make([]string, 0, len(restore))
		for k := range restore {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if _, err := c.patchNode(ctx, n.Name, nil, restore); err != nil {
			c.o.Log.Error("write the controller's keys back", "node", n.Name, "err", err)
		} else {
			c.ev.emit(ctx, n.Name, corev1.EventTypeWarning, ReasonRestored,
				"the controller's %s on this Node changed, not by the controller (the node, its kubelet or an admin): written back; the controller decides only from its own record (fix a held node's unreadable value on the Node as before)",
				strings.Join(keys, ", "))
		}
	}
	return c.recorded(n)
}

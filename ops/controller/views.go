package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
)

// The controller's side of the nodes' instructions (protocol.View): after each
// pass over a channel it knows which nodes the channel concerns (the ones
// that follow it, and the holders of its slots and permits) and what each
// must see; a queue of nodes, worked apart from the passes, writes each
// node's views where they differ (its NodeUpdate when its agent reads
// them there, nodeupdates.go; else its Node's view annotations), so a pass over a thousand
// nodes waits for none of their writes. A node's view of a channel changes
// only when the channel's spec, target or resolved release changes, or its
// slot or permit does: the folds of its phase reports write nothing.

// viewWorkers write the views of that many nodes at once.
const viewWorkers = 2

// setViews records the views ch's nodes must hold after a pass (follows:
// the nodes that follow ch) and queues the nodes whose Node shows another.
// Slot and permit holders are queued first, and the view queue pops the
// slot holders before every other node (viewqueue.go).
func (ctl *Controller) setViews(ch *v1.UpdateChannel, follows []plan.Node) {
	follow := map[string]bool{}
	for _, n := range follows {
		follow[n.Name] = true
	}
	want := map[string]string{}
	var first []string
	base, _ := plan.ViewOf(ch, "", true)
	common := base.String() // a follower's without slot or permit: one string shared by all
	consider := func(node string) {
		if _, done := want[node]; done {
			return
		}
		v, ok := plan.ViewOf(ch, node, follow[node])
		switch {
		case !ok:
		case v.Slot != nil || v.Permit != nil:
			want[node] = v.String()
			first = append(first, node)
		default:
			want[node] = common
		}
	}
	for _, s := range ch.Status.Updating {
		consider(s.Node)
	}
	for _, p := range ch.Status.Staging {
		consider(p.Node)
	}
	for _, n := range follows {
		if _, done := want[n.Name]; !done {
			want[n.Name] = common // neither a slot nor a permit: those were considered above
		}
	}
	ctl.mu.Lock()
	ctl.views[ch.UID] = want
	ctl.mu.Unlock()
	// Before queueing: the views of slot holders and of nodes whose slot
	// was taken away (revoke.go) go first.
	ctl.slotNodes.set(ch.UID, append(slotNodesOf(ch), ctl.fleetCacheOf(ch.Name).revoked.nodes()...))
	key := protocol.ViewKey(ch.UID)
	for _, n := range first {
		if ctl.viewDue(n, key, ch.UID, want[n]) {
			ctl.viewQueue.Add(n)
		}
	}
	for n, w := range want {
		if ctl.viewDue(n, key, ch.UID, w) {
			ctl.viewQueue.Add(n)
		}
	}
	ctl.queueNodesWith(key, want)
}

// slotNodesOf are the nodes holding a slot of ch.
func slotNodesOf(ch *v1.UpdateChannel) []string {
	out := make([]string, 0, len(ch.Status.Updating))
	for _, s := range ch.Status.Updating {
		out = append(out, s.Node)
	}
	return out
}

// queueNodesWith queues the nodes whose Node holds the view key and
// should not (not in want).
func (ctl *Controller) queueNodesWith(key string, want map[string]string) {
	for _, o := range ctl.nodes.List() {
		m, ok := nodeMeta(o)
		if !ok {
			continue
		}
		if ctl.holdsView(m, key) {
			if _, wanted := want[m.Name]; !wanted {
				ctl.viewQueue.Add(m.Name)
			}
		} else if _, has := m.Annotations[key]; has {
			ctl.viewQueue.Add(m.Name) // left on the Node of an agent that reads its NodeUpdate now
		}
	}
}

// dropViews forgets the views of a deleted channel and queues the nodes
// that hold one.
func (ctl *Controller) dropViews(uid types.UID) {
	ctl.mu.Lock()
	delete(ctl.views, uid)
	ctl.mu.Unlock()
	ctl.slotNodes.drop(uid)
	ctl.memo.forgetChannel(uid)
	ctl.queueNodesWith(protocol.ViewKey(uid), nil)
}

// viewDue reports whether node's view of the channel of UID uid (under key) must be
// written: the cache shows another than want, and not only a slot the
// node reported ended or a permit it gave back (plan.EndedOnly).
func (ctl *Controller) viewDue(node, key string, uid types.UID, want string) bool {
	have := ctl.viewsSeen(node)
	cur := have[key]
	return cur != want && !ctl.endedOnly(node, have, uid, cur, want)
}

// endedOnly is plan.EndedOnly with node's report of the channel of UID
// uid read from its annotations (have), decided once per change of the
// three (viewmemo.go).
func (ctl *Controller) endedOnly(node string, have map[string]string, uid types.UID, cur, want string) bool {
	if cur == "" {
		return false
	}
	report := have[protocol.AnnotationSlotReport]
	return ctl.memo.endedOnly(node, uid, cur, want, report, func() bool { return endedOnly(report, uid, cur, want) })
}

// endedOnly is plan.EndedOnly with the node's report of the channel of
// UID uid read from its reports annotation.
func endedOnly(reports string, uid types.UID, cur, want string) bool {
	r, err := protocol.ParseReports(reports)
	return err == nil && plan.EndedOnly(cur, want, r[uid])
}

func (ctl *Controller) nodeMetaOf(node string) *metav1.ObjectMeta {
	o, ok, _ := ctl.nodes.GetByKey(node)
	if !ok {
		return nil
	}
	m, _ := nodeMeta(o)
	return m
}

// workViews writes the nodes' views until the queue shuts down.
func (ctl *Controller) workViews(ctx context.Context) {
	process.Work(ctx, ctl.viewQueue, func(ctx context.Context, node string) (time.Duration, error) { return 0, ctl.syncViews(ctx, node) },
		func(node string, err error) {
			ctl.log.Warn("writing a node's channel views failed; retrying", "node", node, "err", err)
		})
}

// syncViews writes on node the views it should hold and removes those of
// channels it no longer concerns, in one patch. A view of a channel the
// controller has made no pass over yet (it just took the Lease) stays;
// one of a channel of this namespace that is gone (asked of the API
// server) goes.
func (ctl *Controller) syncViews(ctx context.Context, node string) error {
	if !ctl.elected.Load() {
		return nil // the next holder writes them
	}
	have := ctl.viewsSeen(node)
	patch := map[string]any{}
	ctl.mu.Lock()
	for uid, want := range ctl.views {
		key := protocol.ViewKey(uid)
		w, ok := want[node]
		cur, has := have[key]
		switch {
		case ok && cur != w && !ctl.endedOnly(node, have, uid, cur, w):
			patch[key] = w
		case !ok && has:
			patch[key] = nil
		}
	}
	ctl.mu.Unlock()
	for key, val := range have {
		if !strings.HasPrefix(key, protocol.AnnotationChannelViewPrefix) {
			continue
		}
		uid := types.UID(strings.TrimPrefix(key, protocol.AnnotationChannelViewPrefix))
		if ctl.knowsViews(uid) {
			continue
		}
		gone, err := ctl.viewGone(ctx, uid, val)
		if err != nil {
			return err
		}
		if gone {
			patch[key] = nil
		}
	}
	if u := ctl.nodeUpdateOf(node); agentReadsObject(u) {
		return ctl.writeObjectViews(ctx, node, u, have, patch)
	} else if err := ctl.ensureNodeUpdate(ctx, node, u); err != nil {
		return err
	}
	if len(patch) == 0 {
		return nil
	}
	if err := ctl.patchNodeViews(ctx, node, patch); err != nil {
		return fmt.Errorf("write the channel views of node %s: %w", node, err)
	}
	ctl.metrics.viewWrites.Inc()
	ctl.revokedViewWritten(node)
	return nil
}

// patchNodeViews writes the view annotations patch (nil: removed) on
// node's Node and remembers the write (viewsSeen); a Node gone is no error.
func (ctl *Controller) patchNodeViews(ctx context.Context, node string, patch map[string]any) error {
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": patch}})
	if err != nil {
		return err
	}
	written, err := ctl.kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	ctl.noteViewsWritten(node, written.ResourceVersion, patch)
	return nil
}

// viewsWritten is what the controller last wrote of a Node's views: the
// Node's resource version after the write, and the annotations written
// (nil: removed).
type viewsWritten struct {
	rv     string
	values map[string]any
}

// viewsSeen is node's annotations as the cache has them, with this
// process's last view write laid over them while the cache does not show
// it yet: a pass that follows the write faster than the watch must not
// write the same views again. The map may be the cache's or the memo's
// (viewmemo.go): read it, do not change it.
func (ctl *Controller) viewsSeen(node string) map[string]string {
	if u := ctl.nodeUpdateOf(node); agentReadsObject(u) {
		return ctl.objectViews(u) // its agent reads them there
	}
	have := map[string]string{}
	rv := ""
	if m := ctl.nodeMetaOf(node); m != nil {
		have, rv = m.Annotations, m.ResourceVersion
	}
	ctl.mu.Lock()
	w, ok := ctl.viewWrites[node]
	ctl.mu.Unlock()
	if !ok || !olderThan(rv, w.rv) {
		return have
	}
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range w.values {
		if s, isString := v.(string); isString {
			out[k] = s
		} else {
			delete(out, k)
		}
	}
	return out
}

func (ctl *Controller) noteViewsWritten(node, rv string, values map[string]any) {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	if ctl.viewWrites == nil {
		ctl.viewWrites = map[string]viewsWritten{}
	}
	ctl.viewWrites[node] = viewsWritten{rv: rv, values: values}
}

func (ctl *Controller) knowsViews(uid types.UID) bool {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	_, ok := ctl.views[uid]
	return ok
}

// viewGone reports whether a view of the channel of UID uid (value val)
// belongs to a channel of this namespace that no longer exists: not in
// the cache, and not found by name (or found with another UID) by the API
// server. Views of another namespace's channels are another controller's.
func (ctl *Controller) viewGone(ctx context.Context, uid types.UID, val string) (bool, error) {
	v, err := protocol.ParseView(val)
	if err != nil {
		return true, nil // not a view: nobody can act on it
	}
	if v.Namespace != ctl.opts.Namespace {
		return false, nil
	}
	if c, err := ctl.channels.UpdateChannels(ctl.opts.Namespace).Get(v.Name); err == nil && c.UID == uid {
		return false, nil
	}
	cur, err := ctl.ops.UpdateChannels(ctl.opts.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("read channel %s before removing its views: %w", v.Name, err)
	}
	return cur.UID != uid, nil
}

// queueAllViews queues every node (the controller just took the Lease:
// views of channels deleted meanwhile go).
func (ctl *Controller) queueAllViews() {
	for _, name := range ctl.nodes.ListKeys() {
		ctl.viewQueue.Add(name)
	}
}

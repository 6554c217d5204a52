package protocol

import (
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// A node's instructions: no agent reads the channels. For every channel
// that concerns a node (the channel it follows, and any channel where it
// holds a slot or a staging permit) the controller writes a View on that
// node's own Node (one annotation per channel, keyed by the channel's
// UID), and the agent reads only its own Node. A channel's status write
// then reaches the nodes it changes, not every node.

// View is what one node needs of one channel: its identity and spec, its
// target, the resolved release, and the node's own slot and staging
// permit. It is the API's ChannelView under another name, so the channel
// view annotation on a Node and a NodeUpdate's spec.channels[] carry the
// same fields, and a field added there is in both (its doc comments are
// there).
type View v1.ChannelView

// String is the annotation's value.
func (v View) String() string {
	b, _ := json.Marshal(v) // plain structs: cannot fail
	return string(b)
}

// ParseView reads a view annotation.
func ParseView(s string) (View, error) {
	var v View
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return View{}, fmt.Errorf("the channel view annotation is not JSON: %w", err)
	}
	if v.Name == "" {
		return View{}, fmt.Errorf("the channel view annotation names no channel")
	}
	return v, nil
}

// Channel is the channel as the node sees it through v (the channel's
// UID uid): its spec, and a status holding the node's slot and permit,
// the latest version and the resolved release only.
func (v View) Channel(uid types.UID) *v1.UpdateChannel {
	ch := &v1.UpdateChannel{
		ObjectMeta: metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name, UID: uid, CreationTimestamp: v.Created},
		Spec:       v.Spec,
		Status:     v1.UpdateChannelStatus{LatestVersion: v.LatestVersion, Resolved: v.Resolved},
	}
	if v.Slot != nil {
		ch.Status.Updating = []v1.Slot{*v.Slot}
	}
	if v.Permit != nil {
		ch.Status.Staging = []v1.StagePermit{*v.Permit}
	}
	return ch
}

// ViewKey is the annotation holding the view of the channel of UID uid.
func ViewKey(uid types.UID) string { return AnnotationChannelViewPrefix + string(uid) }

// ViewsOf reads the views of namespace's channels from a Node's
// annotations, by channel UID. A view that does not parse is left out and
// handed to skipped (the controller writes it again).
func ViewsOf(annotations map[string]string, namespace string, skipped func(key string, err error)) map[types.UID]View {
	out := map[types.UID]View{}
	for k, val := range annotations {
		if !strings.HasPrefix(k, AnnotationChannelViewPrefix) {
			continue
		}
		// trust: ops.node.channel-view
		v, err := ParseView(val)
		if err != nil {
			skipped(k, err)
			continue
		}
		if v.Namespace == namespace {
			out[types.UID(strings.TrimPrefix(k, AnnotationChannelViewPrefix))] = v
		}
	}
	return out
}

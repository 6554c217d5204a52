package agent

import (
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// A node follows one channel: the earliest (creationTimestamp, then name)
// of the namespace's valid channels whose selector matches it.
//
// Where the channels come from: the controller watches them; an agent
// reads none, only the views the controller wrote on its own Node
// (protocol.View, views.go), each a channel as far as it concerns this node.

// channelRefs are the valid channels its Node's views name (plan.Refs).
func (a *Agent) channelRefs() []plan.ChannelRef {
	list, err := a.listChannels()
	if err != nil {
		return nil
	}
	return plan.Refs(list)
}

// listChannels lists the channels as its own Node's views show them.
func (a *Agent) listChannels() ([]*v1.UpdateChannel, error) {
	views := a.viewsNow()
	out := make([]*v1.UpdateChannel, 0, len(views))
	for uid, v := range views {
		out = append(out, v.Channel(uid))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// getChannel returns channel name (a NotFound error when there is none).
func (a *Agent) getChannel(name string) (*v1.UpdateChannel, error) {
	for uid, v := range a.viewsNow() {
		if v.Name == name {
			return v.Channel(uid), nil
		}
	}
	return nil, apierrors.NewNotFound(v1.Resource("updatechannels"), name)
}

// viewsNow are this node's views as its informers have them: in its
// NodeUpdate once the controller writes them there, else on its Node.
// The Node is not read when the views are in the NodeUpdate: an idle
// agent's Node watch is closed (workwatch.go), and its NodeUpdate's event
// is what opens it again.
func (a *Agent) viewsNow() map[types.UID]protocol.View {
	u := a.ownObject()
	var annotations map[string]string
	if !viewsInObject(u) {
		n := a.ownNode()
		if n == nil {
			return nil
		}
		annotations = n.Annotations
	}
	// trust: ops.agent.own-nodeupdate
	return protocol.NodeViews(annotations, u, a.opts.Namespace, func(key string, err error) {
		a.log.Warn("ignoring a channel view on this node", "annotation", key, "err", err)
	})
}

// viewsOf reads the views of this namespace's channels from a Node's
// annotations. A view that does not parse is logged and skipped: the
// controller writes it again.
func (a *Agent) viewsOf(annotations map[string]string) map[types.UID]protocol.View {
	return protocol.ViewsOf(annotations, a.opts.Namespace, func(key string, err error) {
		a.log.Warn("ignoring a channel view on this node", "annotation", key, "err", err)
	})
}

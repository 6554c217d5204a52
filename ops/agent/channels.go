package agent

import (
	"k8s.io/apimachinery/pkg/labels"

	"slipway.dev/slipway/ops/agent/plan"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// A node follows one channel: the earliest (creationTimestamp, then name)
// of the namespace's valid channels whose selector matches it.

func (a *Agent) channelRef(ch *v1.UpdateChannel, s plan.Settings) plan.ChannelRef {
	return plan.ChannelRef{Name: ch.Name, Created: ch.CreationTimestamp.Time, Selector: s.Selector}
}

// channelRefs are the valid channels of the namespace, from the informer's
// cache. An invalid channel drives no node, so it holds none.
func (a *Agent) channelRefs() []plan.ChannelRef {
	list, err := a.channels.UpdateChannels(a.opts.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []plan.ChannelRef
	for _, ch := range list {
		if ch.DeletionTimestamp != nil {
			continue
		}
		if s, bad := plan.Resolve(ch.Spec); bad == nil {
			out = append(out, a.channelRef(ch, s))
		}
	}
	return out
}

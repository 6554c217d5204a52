package protocol

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// The per-node NodeUpdate carries the same two things as a Node's
// annotations, off the Node: the views in its spec (written by the
// controller), the reports in its status (written by the node's agent).
// These convert between the two encodings; both sides order the lists by
// channel UID, so the same views or reports are the same object.

// NodeUpdateName is the name of node's NodeUpdate: the node's own.
func NodeUpdateName(node string) string { return node }

// SpecOf is the NodeUpdate spec holding views (by channel UID), ordered by UID.
func SpecOf(views map[types.UID]View) v1.NodeUpdateSpec {
	out := v1.NodeUpdateSpec{}
	for uid, v := range views {
		out.Channels = append(out.Channels, v1.NodeChannel{UID: uid, ChannelView: v1.ChannelView(v)})
	}
	slices.SortFunc(out.Channels, func(a, b v1.NodeChannel) int { return strings.Compare(string(a.UID), string(b.UID)) })
	return out
}

// ViewsOfSpec reads the views of namespace's channels from a NodeUpdate
// spec, by channel UID. An entry without a channel name is left out (the
// API server refuses one; the controller writes the entry again).
func ViewsOfSpec(spec v1.NodeUpdateSpec, namespace string) map[types.UID]View {
	out := map[types.UID]View{}
	for _, c := range spec.Channels {
		if c.Name == "" || c.Namespace != namespace {
			continue
		}
		out[c.UID] = View(c.ChannelView)
	}
	return out
}

// StatusReports are reports as a NodeUpdate's status.reports, ordered by UID.
func (r Reports) StatusReports() []v1.NodeReport {
	out := make([]v1.NodeReport, 0, len(r))
	for uid, rep := range r {
		out = append(out, v1.NodeReport{UID: uid, SlotReport: v1.SlotReport(rep)})
	}
	slices.SortFunc(out, func(a, b v1.NodeReport) int { return strings.Compare(string(a.UID), string(b.UID)) })
	return out
}

// ReportsOfStatus reads a node's reports from its NodeUpdate's status.
func ReportsOfStatus(status v1.NodeUpdateStatus) Reports {
	out := Reports{}
	for _, r := range status.Reports {
		out[r.UID] = Report(r.SlotReport)
	}
	return out
}

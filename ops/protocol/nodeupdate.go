package protocol

import (
	"fmt"
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

// NodeUpdateProtocol is the protocol of an agent that reads its
// instructions from its NodeUpdate and reports in its status, and of a
// controller that writes them there (status.protocol, spec.protocol).
// Agents of the first release announce none: they read the views on
// their Node and report there.
const NodeUpdateProtocol = 2

// VersionsProtocol is the protocol of an agent that also keeps its
// versions in its NodeUpdate's status, current at every change (booted,
// with the boot ID they were recorded in, and staged), and of a controller
// that reads them there: once both speak it (status.protocol and
// spec.protocol 3) the agent keeps only the version labels on its Node.
// An agent of protocol 2 writes its versions on its Node, and in its status
// only with its reports.
const VersionsProtocol = 3

// Protocol is the highest protocol this release speaks.
const Protocol = VersionsProtocol

// Spoken is the NodeUpdate protocol a program set to p speaks: this
// release's (Protocol) for 0, p when this release speaks it, else an error.
func Spoken(p int) (int, error) {
	switch p {
	case 0:
		return Protocol, nil
	case NodeUpdateProtocol, VersionsProtocol:
		return p, nil
	}
	return 0, fmt.Errorf("protocol %d: this release speaks %d and %d", p, NodeUpdateProtocol, VersionsProtocol)
}

// SpecProtocol is the spec.protocol a controller that speaks up to speaks
// writes in the NodeUpdate of an agent that announced announced
// (status.protocol): the highest both speak; 0 (nothing written there)
// while the agent reads no NodeUpdate.
func SpecProtocol(announced, speaks int) int {
	if announced < NodeUpdateProtocol || speaks < NodeUpdateProtocol {
		return 0
	}
	return min(announced, speaks)
}

// VersionsInStatus tells whether the agent of NodeUpdate u keeps its
// versions current in its status (it announced VersionsProtocol there).
func VersionsInStatus(u *v1.NodeUpdate) bool {
	return u != nil && u.Status.Protocol >= VersionsProtocol
}

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

// NodeViews are the views a node's agent acts on: those in its NodeUpdate u
// once the controller writes them there (spec.protocol), else those in its
// Node's annotations (ViewsOf, skipped as there).
func NodeViews(annotations map[string]string, u *v1.NodeUpdate, namespace string, skipped func(key string, err error)) map[types.UID]View {
	if u != nil && u.Spec.Protocol >= NodeUpdateProtocol {
		return ViewsOfSpec(u.Spec, namespace)
	}
	return ViewsOf(annotations, namespace, skipped)
}

// NodeReports are the reports a node's agent wrote: in its NodeUpdate u
// once it announced there (status.protocol), else in its Node's annotation.
func NodeReports(annotations map[string]string, u *v1.NodeUpdate) (Reports, error) {
	if u != nil && u.Status.Protocol >= NodeUpdateProtocol {
		return ReportsOfStatus(u.Status), nil
	}
	return ParseReports(annotations[AnnotationSlotReport])
}

// PublishedVersions are a node's versions as its agent publishes them, for
// a reader of both objects (tests, tools): what its boot runs (with the
// boot ID) and what it stages for the next boot, from its NodeUpdate u's
// status once the agent keeps them current there (VersionsInStatus), else
// from its Node's annotations.
func PublishedVersions(annotations map[string]string, u *v1.NodeUpdate) (booted, staged v1.NodeVersions) {
	if VersionsInStatus(u) {
		if b := u.Status.Booted; b != nil {
			booted = *b
		}
		if s := u.Status.Staged; s != nil {
			staged = *s
		}
		return booted, staged
	}
	booted = v1.NodeVersions{Rootfs: annotations[AnnotationRootfsVersion], Kernel: annotations[AnnotationKernelVersion],
		K3s: annotations[AnnotationK3sVersion], BootID: annotations[AnnotationBootedBootID]}
	staged = v1.NodeVersions{Rootfs: annotations[AnnotationStagedRootfsVersion], Kernel: annotations[AnnotationStagedKernelVersion],
		K3s: annotations[AnnotationStagedK3sVersion]}
	return booted, staged
}

// Cached is what NodeUpdateIn reads: an informer's store (client-go's
// cache.Store), by namespace/name key.
type Cached interface {
	GetByKey(key string) (item any, exists bool, err error)
}

// NodeUpdateIn is node's NodeUpdate in namespace as store holds it (nil:
// none, or no store): the agent's cache of its own, the controller's of all.
func NodeUpdateIn(store Cached, namespace, node string) *v1.NodeUpdate {
	if store == nil {
		return nil
	}
	o, ok, _ := store.GetByKey(namespace + "/" + NodeUpdateName(node))
	if !ok {
		return nil
	}
	u, _ := o.(*v1.NodeUpdate)
	return u
}

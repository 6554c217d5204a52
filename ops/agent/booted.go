package agent

import (
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade/boot"
)

// What a node runs and what it has staged for its next boot are two things:
// an upgrade Job swaps the system directory's `current` links during a
// boot, and the node runs the new version only after it reboots. The agent
// decides once per boot what that boot runs (plan.Running) and publishes it
// with the boot ID it belongs to; what `current` names beyond that is
// published as staged.

// bootEvidence gathers what this agent knows about its node's boot, from
// Node n (its boot ID with --boot-id-from-node) and the versions recorded
// for this boot: in its NodeUpdate u's status, else on n (where an agent of
// protocol 2 keeps them, or one whose controller does not read the
// status), else in this boot's file.
func (a *Agent) bootEvidence(n *corev1.Node, u *v1.NodeUpdate) (plan.BootEvidence, error) {
	var e plan.BootEvidence
	var err error
	if e.BootID, err = a.bootIDOf(n); err != nil {
		return e, err
	}
	if e.Current, err = ReadVersions(a.opts.SystemDir); err != nil {
		return e, err
	}
	if n != nil {
		// trust: ops.agent.own-boot-record
		e.RecordedBoot = n.Annotations[protocol.AnnotationBootedBootID]
		e.Recorded = Versions{Rootfs: n.Annotations[protocol.AnnotationRootfsVersion], Kernel: n.Annotations[protocol.AnnotationKernelVersion],
			K3s: n.Annotations[protocol.AnnotationK3sVersion]}
	}
	// trust: ops.agent.own-nodeupdate
	if b := bootedOf(u); b != nil && b.BootID == e.BootID && b.Rootfs != "" {
		e.RecordedBoot, e.Recorded = b.BootID, Versions{Rootfs: b.Rootfs, Kernel: b.Kernel, K3s: b.K3s}
	}
	if e.RecordedBoot != e.BootID { // the Node lost its record (registered again): this boot's file (bootrecord.go)
		if v, ok := a.readBootRecord(e.BootID); ok {
			e.RecordedBoot, e.Recorded = e.BootID, v
		}
	}
	if b, err := os.ReadFile(a.opts.CmdlineFile); err == nil {
		e.CmdlineRootfs = boot.CmdlineValue(strings.TrimSpace(string(b)), boot.ArgRootfs)
	}
	return e, nil
}

// bootIDOf is the running boot's ID: from Node n with --boot-id-from-node
// (simulated nodes), else from --boot-id-file.
func (a *Agent) bootIDOf(n *corev1.Node) (string, error) {
	if a.opts.BootIDFromNode {
		if n == nil {
			return "", fmt.Errorf("node %s not seen yet (--boot-id-from-node)", a.opts.NodeName)
		}
		if n.Status.NodeInfo.BootID == "" {
			return "unreported", nil // a simulated node registered without one (the test clusters give every node one)
		}
		// trust: ops.agent.own-boot-id
		return n.Status.NodeInfo.BootID, nil
	}
	b, err := os.ReadFile(a.opts.BootIDFile)
	if err != nil {
		return "", fmt.Errorf("read the boot ID from %s (--boot-id-file): %w", a.opts.BootIDFile, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// bootMeta is the labels and annotations that publish running (with the
// boot they belong to) and what current stages beyond it.
func bootMeta(running, current Versions, bootID string) (labels, annotations map[string]any) {
	labels, annotations = nodeMeta(running)
	annotations[protocol.AnnotationBootedBootID] = bootID
	staged := plan.Staged(running, current)
	for _, kv := range []struct{ key, value string }{
		{protocol.AnnotationStagedRootfsVersion, staged.Rootfs}, {protocol.AnnotationStagedKernelVersion, staged.Kernel}, {protocol.AnnotationStagedK3sVersion, staged.K3s},
	} {
		annotations[kv.key] = nilIfEmpty(kv.value)
	}
	labels[protocol.LabelStagedRootfsVersion] = nil
	if staged.Rootfs != "" {
		labels[protocol.LabelStagedRootfsVersion] = protocol.LabelValue(staged.Rootfs)
	}
	return labels, annotations
}

// bootedOf is the versions NodeUpdate u records for a boot (nil: none).
func bootedOf(u *v1.NodeUpdate) *v1.NodeVersions {
	if u == nil {
		return nil
	}
	return u.Status.Booted
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// currentVersions is what the system directory's `current` links name;
// nil when they cannot be read.
func (a *Agent) currentVersions() *Versions {
	v, err := ReadVersions(a.opts.SystemDir)
	if err != nil {
		a.log.Warn("cannot read the system directory's versions", "err", err)
		return nil
	}
	return &v
}

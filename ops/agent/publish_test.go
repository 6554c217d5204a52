package agent

import (
	"testing"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
)

// Where a node's versions are published: on its Node alone (an agent that
// has not announced protocol 3, or not yet in this NodeUpdate), on its Node
// and in its status (a controller of protocol 2 still reads the Node), in
// its status alone with the version labels left on the Node.
func TestVersionsFor(t *testing.T) {
	running := Versions{Rootfs: "v1", Kernel: "k1", K3s: "v1.33.1+k3s1"}
	current := Versions{Rootfs: "v2", Kernel: "k1", K3s: "v1.33.1+k3s1"}
	labels := map[string]any{protocol.LabelRootfsVersion: "v1", protocol.LabelKernelVersion: "k1", protocol.LabelK3sVersion: "v1.33.1-k3s1"}
	for _, c := range []struct {
		name                 string
		inStatus, onlyStatus bool
		stagedLabel          any
		annotation           map[string]any // of the moved annotations
		status               bool
	}{
		{"on the Node", false, false, "v2", map[string]any{protocol.AnnotationRootfsVersion: "v1", protocol.AnnotationBootedBootID: "boot-1",
			protocol.AnnotationStagedRootfsVersion: "v2", protocol.AnnotationStagedKernelVersion: nil}, false},
		{"on the Node and in the status", true, false, "v2", map[string]any{protocol.AnnotationRootfsVersion: "v1", protocol.AnnotationBootedBootID: "boot-1",
			protocol.AnnotationStagedRootfsVersion: "v2"}, true},
		{"in the status alone", true, true, nil, map[string]any{protocol.AnnotationRootfsVersion: nil, protocol.AnnotationKernelVersion: nil,
			protocol.AnnotationK3sVersion: nil, protocol.AnnotationBootedBootID: nil, protocol.AnnotationStagedRootfsVersion: nil}, true},
		{"onlyStatus without inStatus is on the Node", false, true, "v2", map[string]any{protocol.AnnotationRootfsVersion: "v1"}, false},
	} {
		out := versionsFor(running, current, "boot-1", c.inStatus, c.onlyStatus)
		for k, want := range labels {
			if out.labels[k] != want {
				t.Errorf("%s: label %s = %v, want %v", c.name, k, out.labels[k], want)
			}
		}
		if got := out.labels[protocol.LabelStagedRootfsVersion]; got != c.stagedLabel {
			t.Errorf("%s: staged label = %v, want %v", c.name, got, c.stagedLabel)
		}
		for k, want := range c.annotation {
			if got, ok := out.annotations[k]; !ok || got != want {
				t.Errorf("%s: annotation %s = %v (set %t), want %v", c.name, k, got, ok, want)
			}
		}
		if (out.status != nil) != c.status {
			t.Fatalf("%s: status %v, want one: %t", c.name, out.status, c.status)
		}
		if out.status == nil {
			continue
		}
		want := v1.NodeUpdateStatus{Booted: &v1.NodeVersions{Rootfs: "v1", Kernel: "k1", K3s: "v1.33.1+k3s1", BootID: "boot-1"}, Staged: &v1.NodeVersions{Rootfs: "v2"}}
		if !sameStatus(want, out.status) {
			t.Errorf("%s: status %v, want booted %+v staged %+v", c.name, out.status, *want.Booted, *want.Staged)
		}
		for _, other := range []v1.NodeUpdateStatus{
			{Booted: want.Booted}, // nothing staged
			{Staged: want.Staged}, // no booted versions
			{Booted: &v1.NodeVersions{Rootfs: "v1", Kernel: "k1", K3s: "v1.33.1+k3s1", BootID: "boot-0"}, Staged: want.Staged}, // another boot
			{Booted: want.Booted, Staged: &v1.NodeVersions{Rootfs: "v3"}},
		} {
			if sameStatus(other, out.status) {
				t.Errorf("%s: status %+v taken for %v", c.name, other, out.status)
			}
		}
	}
	if st := statusVersions(running, running, "boot-1"); st["staged"] != nil || !sameStatus(v1.NodeUpdateStatus{Booted: &v1.NodeVersions{Rootfs: "v1", Kernel: "k1", K3s: "v1.33.1+k3s1", BootID: "boot-1"}}, st) {
		t.Errorf("nothing staged: status %v", st)
	}
}

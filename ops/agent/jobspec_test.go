package agent

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade/layout"
)

// TestJobSpecCanRemount: stock k3os mounts /k3os/system read-only; the
// upgrade and rollback Jobs pass --remount and have what a remount from a
// container needs (CAP_SYS_ADMIN, no AppArmor mount rule, a writable
// hostPath of the system directory).
func TestJobSpecCanRemount(t *testing.T) {
	a, ch, s := jobTestAgent(t)
	slot := v1.Slot{Node: "n1", Version: "v2", Attempt: 1, Since: metav1.NewTime(time.Unix(1e9, 0))}
	for name, j := range map[string]*corev1.PodSpec{
		"upgrade":  &a.buildJob(ch, s, slot).Spec.Template.Spec,
		"rollback": &a.buildRollbackJob(ch, "rollback-n1", vs("v2", "v2", ""), "boot-1", 1, []layout.Component{layout.Rootfs, layout.Kernel}).Spec.Template.Spec,
		"stage":    &a.buildStageJob(ch, s, v1.StagePermit{Node: "n1", Version: "v2", Since: slot.Since}, 1).Spec.Template.Spec,
		"prune":    &a.buildPruneJob(ch, s, "prune-n1", "v2").Spec.Template.Spec,
	} {
		c := j.Containers[0]
		if !slices.Contains(c.Args, "--remount") || name != "prune" && !slices.Contains(c.Args, "--reboot=false") {
			t.Errorf("%s: args %v lack --remount or --reboot=false", name, c.Args)
		}
		if !slices.Contains(c.SecurityContext.Capabilities.Add, "SYS_ADMIN") {
			t.Errorf("%s: no CAP_SYS_ADMIN for the remount: %+v", name, c.SecurityContext.Capabilities)
		}
		if p := c.SecurityContext.AppArmorProfile; p == nil || p.Type != corev1.AppArmorProfileTypeUnconfined {
			t.Errorf("%s: AppArmor profile %+v would refuse mount(2)", name, p)
		}
		for _, m := range c.VolumeMounts {
			if m.Name == "system" && (m.ReadOnly || m.MountPath != jobSystemDir) {
				t.Errorf("%s: system directory mount %+v", name, m)
			}
		}
	}
	if args := a.buildRollbackJob(ch, "rollback-n1", vs("v2", "v2", ""), "boot-1", 1, []layout.Component{layout.Rootfs, layout.Kernel}).Spec.Template.Spec.Containers[0].Args; args[1] != "rollback" || slices.Contains(args, "--version") {
		t.Errorf("rollback args %v", args)
	}
}

// TestStagingJobs: the staging Job stages and moves no link, the pruning
// Job keeps the target, and both are told apart from the slot's Job.
func TestStagingJobs(t *testing.T) {
	a, ch, s := jobTestAgent(t)
	p := v1.StagePermit{Node: "n1", Version: "v2", Since: metav1.NewTime(time.Unix(1e9, 0))}
	stage := a.buildStageJob(ch, s, p, 2)
	if args := stage.Spec.Template.Spec.Containers[0].Args; protocol.ArgAfterFlag(args, "--phase") != "stage" || protocol.ArgAfterFlag(args, "--version") != "v2" {
		t.Errorf("staging args %v", args)
	}
	if stage.Annotations[protocol.AnnotationJobAction] != protocol.JobActionStage || stage.Annotations[protocol.AnnotationJobPermitSince] != permitSince(p) ||
		stage.Spec.Template.Annotations[protocol.AnnotationJobAction] != protocol.JobActionStage {
		t.Errorf("staging Job annotations %v", stage.Annotations)
	}
	if stage.Name == StageJobName("u1", p, 1) || stage.Name == protocol.SlotJobName("u1", v1.Slot{Node: "n1", Version: "v2", Attempt: 2, Since: p.Since}) {
		t.Errorf("staging Job name %s is not its own", stage.Name)
	}
	want := []string{"ops", "prune", "--system-dir", jobSystemDir, "--lock-file", jobLockDir + "/upgrade.lock", "--remount", "--keep", "v2"}
	if got := a.buildPruneJob(ch, s, "prune-n1", "v2").Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, want) {
		t.Errorf("prune args %v, want %v", got, want)
	}
	if got := pruneArgs([]string{"ops", "upgrade"}, ""); !slices.Equal(got, []string{"ops", "prune"}) {
		t.Errorf("prune args with no target %v: keep nothing", got)
	}
}

// jobTestAgent is an agent on node n1 that only builds Jobs, a channel and its settings.
func jobTestAgent(t *testing.T) (*Agent, *v1.UpdateChannel, plan.Settings) {
	t.Helper()
	a := &Agent{opts: Options{NodeName: "n1", Namespace: "ns", HostSystemDir: "/k3os/system", HostLockDir: "/run/k3os",
		UpgradeCommand: []string{"slipway"}, Image: "slipway:test"}}
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "default", UID: "u1"}}
	s, bad := plan.Resolve(v1.UpdateChannelSpec{URL: "file:///mirror", Version: "v2"})
	if bad != nil {
		t.Fatal(bad)
	}
	return a, ch, s
}

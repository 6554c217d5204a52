package agent

import (
	"fmt"
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade/layout"
)

// Paths inside the upgrade Job's container.
const (
	jobSystemDir = "/k3os/system"
	jobLockDir   = "/run/k3os"
)

// jobTTL keeps a finished Job (and its pod's logs) a day for people to read.
const jobTTL = 24 * 60 * 60

// upgradeArgs is the `ops upgrade` command line of a slot.
func upgradeArgs(s plan.Settings, version string) []string {
	args := []string{"ops", "upgrade", "--system-dir", jobSystemDir, "--lock-file", jobLockDir + "/upgrade.lock",
		"--source", s.URL, "--version", version, "--reboot=false",
		"--remount"} // stock k3os mounts the system directory read-only: writable for the swap only
	if s.Components.Rootfs {
		args = append(args, "--rootfs")
	}
	if s.Components.Kernel {
		args = append(args, "--kernel")
	}
	if s.Components.K3s {
		args = append(args, "--k3s")
	}
	return args
}

// buildJob is the upgrade Job for slot on this agent's node: bound to the
// node, deadline from upgradeTimeout, no retries inside the Job (the agent
// retries with backoff under a new name), the system directory and lock
// directory from the host, and only the capabilities a swap needs: the
// remount of the Job's own bind of the system directory (--remount) needs
// CAP_SYS_ADMIN and no AppArmor mount rule, not a privileged pod; it
// changes no mount the host sees except through the shared filesystem, so
// no mount propagation is needed either.
func (a *Agent) buildJob(ch *v1.UpdateChannel, s plan.Settings, slot v1.Slot) *batchv1.Job {
	image := s.Image
	if image == "" {
		image = a.opts.Image
	}
	labels := map[string]string{
		protocol.LabelAppName: protocol.LabelAppNameUpgrade, protocol.LabelManagedBy: protocol.LabelManagedByAgent,
		protocol.LabelJobNode: protocol.LabelValue(a.opts.NodeName), protocol.LabelJobChannel: protocol.LabelValue(ch.Name),
	}
	annotations := jobOwnerAnnotations(ch.UID, slot)
	annotations[protocol.AnnotationJobChannel] = ch.Name
	deadline := int64(s.UpgradeTimeout.Seconds())
	zero, ttl := int32(0), int32(jobTTL)
	hostDir := corev1.HostPathDirectory
	hostDirOrCreate := corev1.HostPathDirectoryOrCreate
	no := false
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: protocol.SlotJobName(ch.UID, slot), Namespace: a.opts.Namespace, Labels: labels,
			Annotations: annotations,
		},
		Spec: batchv1.JobSpec{
			BackoffLimit: &zero, ActiveDeadlineSeconds: &deadline, TTLSecondsAfterFinished: &ttl,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: corev1.PodSpec{
					NodeName:                     a.opts.NodeName,
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: &no, // the Job needs no API access
					Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "upgrade", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
						Command: a.opts.UpgradeCommand, Args: upgradeArgs(s, slot.Version),
						SecurityContext: &corev1.SecurityContext{
							RunAsUser: new(int64), AllowPrivilegeEscalation: &no,
							// The remount is a mount(2): AppArmor's default container profile refuses it.
							AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
							// SYS_ADMIN remounts the system directory read-write; CHOWN,
							// FOWNER and DAC_OVERRIDE keep the release's ownership and modes.
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"},
								Add: []corev1.Capability{"SYS_ADMIN", "CHOWN", "FOWNER", "DAC_OVERRIDE"}},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "system", MountPath: jobSystemDir}, {Name: "lock", MountPath: jobLockDir}},
					}},
					Volumes: []corev1.Volume{
						{Name: "system", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: a.opts.HostSystemDir, Type: &hostDir}}},
						{Name: "lock", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: a.opts.HostLockDir, Type: &hostDirOrCreate}}},
					},
				},
			},
		},
	}
	jobSource(ch, slot.Version, &j.Spec.Template.Spec) // token, resolved release, mirror mount (job_source.go)
	return j
}

// confineJob adds to j what the API server needs to hold its pod to the
// AppArmor profile its containers ask for. Under the webhook isolation the
// server may be older than 1.30: it drops securityContext.appArmorProfile,
// so each container that asks for Unconfined (the remount is a mount(2),
// which the runtime's default profile refuses) also carries the beta
// annotation container.apparmor.security.beta.kubernetes.io/<container>:
// unconfined, which servers before 1.30 read and 1.30+ keep in step with
// the field. The policy isolation needs 1.30, which reads the field: no
// annotation there. Called on every Job the agent creates, after its
// containers have their final names.
func confineJob(j *batchv1.Job, isolation string) {
	if isolation != process.IsolationWebhook {
		return
	}
	t := &j.Spec.Template
	// The template's annotations are the Job's map too (buildJob): the
	// annotation goes on the pod's only.
	t.Annotations = maps.Clone(t.Annotations)
	for _, c := range t.Spec.Containers {
		if sc := c.SecurityContext; sc == nil || sc.AppArmorProfile == nil || sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
			continue
		}
		if t.Annotations == nil {
			t.Annotations = map[string]string{}
		}
		t.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name] = corev1.DeprecatedAppArmorBetaProfileNameUnconfined
	}
}

// UpgradeJob is the upgrade Job an agent on opts.NodeName creates for slot
// of ch (the attack suite checks that the admission policies admit exactly
// this shape). opts needs NodeName and Image; the rest takes its defaults.
func UpgradeJob(opts Options, ch *v1.UpdateChannel, slot v1.Slot) (*batchv1.Job, error) {
	jobs, err := Jobs(opts, ch, slot)
	if err != nil {
		return nil, err
	}
	return jobs[JobUpgrade], nil
}

// The kinds of Job an agent creates (Jobs).
const (
	JobUpgrade  = "upgrade"  // a slot's Job: downloads, verifies and swaps
	JobActivate = "activate" // a slot's Job when its release was staged ahead: swaps only
	JobStage    = "stage"    // stages a release ahead of the slot
	JobPrune    = "prune"    // removes staged releases but the target
	JobRollback = "rollback" // swaps back what an ended rollout left staged
	// JobRollbackOrphan is a rollback whose channel is gone (no channel name or UID).
	JobRollbackOrphan = "rollback-orphan"
	// JobRollbackSlot is a rollback slot's Job: a failed wave's node back to its previous version (backout.go).
	JobRollbackSlot = "rollback-slot"
)

// Jobs are the Jobs of each kind an agent on opts.NodeName creates for
// slot of ch (its staging permit, its pruning and its rollback taken from
// the slot): what the admission policy must admit, and the shapes the
// attack suite mutates. opts needs NodeName and Image; the rest takes its
// defaults.
func Jobs(opts Options, ch *v1.UpdateChannel, slot v1.Slot) (map[string]*batchv1.Job, error) {
	s, bad := plan.Resolve(ch.Spec)
	if bad != nil {
		return nil, fmt.Errorf("channel %s: %s", ch.Name, bad.Message)
	}
	if opts.HostSystemDir == "" {
		opts.HostSystemDir = jobSystemDir
	}
	if opts.HostLockDir == "" {
		opts.HostLockDir = jobLockDir
	}
	if len(opts.UpgradeCommand) == 0 {
		opts.UpgradeCommand = []string{"slipway"}
	}
	if opts.Namespace == "" {
		opts.Namespace = ch.Namespace
	}
	a := &Agent{opts: opts}
	activate := a.buildJob(ch, s, slot)
	c := &activate.Spec.Template.Spec.Containers[0]
	c.Args = append(c.Args, phaseFlag, phaseActivate)
	staged := Versions{Rootfs: slot.Version, Kernel: slot.Version}
	jobs := map[string]*batchv1.Job{
		JobUpgrade:  a.buildJob(ch, s, slot),
		JobActivate: activate,
		JobStage:    a.buildStageJob(ch, s, v1.StagePermit{Node: slot.Node, Version: slot.Version, Since: slot.Since}, slot.Attempt),
		JobPrune: a.buildPruneJob(ch, s, protocol.JobName(protocol.JobKindPrune, opts.NodeName, protocol.ShortHash(slot.Version)[:8]),
			slot.Version),
		JobRollback: a.buildRollbackJob(ch, rollbackJobName(opts.NodeName, slot.Version, "boot-1", slot.Attempt), staged, "boot-1", slot.Attempt,
			[]layout.Component{layout.Rootfs, layout.Kernel}),
		JobRollbackOrphan: a.buildRollbackJob(nil, rollbackJobName(opts.NodeName, slot.Version, "boot-2", slot.Attempt), staged, "boot-2", slot.Attempt,
			[]layout.Component{layout.Rootfs}),
		JobRollbackSlot: a.buildBackoutJob(ch, s, v1.Slot{Node: slot.Node, Version: slot.Version, From: slot.Version + "-failed", Rollback: true,
			Attempt: slot.Attempt, Since: slot.Since}, Versions{Rootfs: slot.Version + "-failed", Kernel: slot.Version + "-failed"}, []layout.Component{layout.Rootfs, layout.Kernel}),
	}
	for _, j := range jobs {
		confineJob(j, opts.Isolation)
	}
	return jobs, nil
}

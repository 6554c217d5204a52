package agent

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// How the upgrade Job reaches its channel: a GitHub channel's Job reads
// the release resolved for the rollout (status.resolved) and gets the
// channel's token from its Secret as GITHUB_TOKEN (an env var from the
// Secret: the token is never in the Job's spec); a mirror directory on the
// node is mounted read-only at its own path, so the channel URL means the
// same inside the Job as on the host.

// mirrorVolume is the name of the mirror's volume in the upgrade Job.
const mirrorVolume = "mirror"

// jobSource adapts the upgrade Job's pod spec to the channel ch at version.
func jobSource(ch *v1.UpdateChannel, version string, spec *corev1.PodSpec) {
	if len(spec.Containers) == 0 {
		return
	}
	c := &spec.Containers[0]
	source := protocol.ArgAfterFlag(c.Args, "--source")
	if r := ch.Status.Resolved; r != nil && r.Version == version && strings.HasPrefix(source, plan.GitHubScheme) && r.Source != "" {
		setArg(c.Args, "--source", r.Source)
	}
	if ref := ch.Spec.TokenSecretRef; ref != nil {
		c.Env = append(c.Env, corev1.EnvVar{Name: "GITHUB_TOKEN", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: plan.SecretKey(ref)}}})
	}
	if dir := plan.MirrorDir(source); dir != "" {
		hostDir := corev1.HostPathDirectory
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: mirrorVolume,
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostDir}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: mirrorVolume, MountPath: dir, ReadOnly: true})
	}
}

func setArg(args []string, flag, value string) {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			args[i+1] = value
		}
	}
}

package agent

import (
	"fmt"
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// A slot's work runs in a Pod of its own (ops/protocol's slotpod.go says
// why): the agent builds the slot's Job as before (buildJob, or
// buildBackoutJob for a rollback slot) and creates the Pod that Job's
// controller would have made of it, bound to this node, with the Job's
// deadline. The caches show that Pod to every reader as the Job it stands
// for (pods.go), so what decides from a slot's Job decides the same.

// slotPodOf is the Pod that carries out slot Job j: j's name, labels and
// annotations (the pod template's too: AppArmor's beta annotation under
// the webhook isolation), its pod spec, and its deadline on the Pod,
// where the kubelet enforces it (DeadlineExceeded). No owner: an owner
// named by the requester is read by the garbage collector, a party that
// deletes, and the Pod policy refuses one.
func slotPodOf(j *batchv1.Job) *corev1.Pod {
	annotations := maps.Clone(j.Annotations)
	maps.Copy(annotations, j.Spec.Template.Annotations)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: j.Name, Namespace: j.Namespace, Labels: maps.Clone(j.Labels), Annotations: annotations},
		Spec:       *j.Spec.Template.Spec.DeepCopy(),
	}
	if d := j.Spec.ActiveDeadlineSeconds; d != nil {
		deadline := *d
		p.Spec.ActiveDeadlineSeconds = &deadline
	}
	return p
}

// The kinds of slot Pod an agent creates (SlotPods).
const (
	PodUpgrade      = JobUpgrade      // downloads, verifies and swaps
	PodActivate     = JobActivate     // swaps a release staged ahead
	PodRollbackSlot = JobRollbackSlot // a failed wave's node back to its previous version
)

// SlotPods are the Pods of each kind an agent on opts.NodeName creates for
// slot of ch: what the Pod policy must admit, and the shapes the attack
// suite mutates. opts needs NodeName and Image; the rest takes its
// defaults (as Jobs).
func SlotPods(opts Options, ch *v1.UpdateChannel, slot v1.Slot) (map[string]*corev1.Pod, error) {
	jobs, err := Jobs(opts, ch, slot)
	if err != nil {
		return nil, err
	}
	out := map[string]*corev1.Pod{}
	for _, kind := range []string{PodUpgrade, PodActivate, PodRollbackSlot} {
		j, ok := jobs[kind]
		if !ok {
			return nil, fmt.Errorf("no %s Job to make the slot's Pod of", kind)
		}
		out[kind] = slotPodOf(j)
	}
	return out, nil
}

package agent

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
)

// jobOwnerAnnotations are the annotations that tie a Job to its slot.
func jobOwnerAnnotations(channelUID types.UID, s v1.Slot) map[string]string {
	return map[string]string{
		protocol.AnnotationJobChannelUID: string(channelUID), protocol.AnnotationJobSlotSince: protocol.SlotSince(s),
		protocol.AnnotationJobNode: s.Node, protocol.AnnotationJobVersion: s.Version, protocol.AnnotationJobAttempt: strconv.Itoa(s.Attempt),
	}
}

// jobOwnedBy reports whether Job j was made for slot s of the channel with
// channelUID, and if not, which annotation differs.
func jobOwnedBy(j *batchv1.Job, channelUID types.UID, s v1.Slot) (bool, string) {
	for k, want := range jobOwnerAnnotations(channelUID, s) {
		// trust: ops.job.owner-annotations
		if got := j.Annotations[k]; got != want {
			return false, fmt.Sprintf("%s is %q, not %q", k, got, want)
		}
	}
	return true, ""
}

// createJob creates Job j for channel ch. When a Job of that name exists
// already, the create's AlreadyExists error is returned (the callers take
// it for done) only if that Job is the one j would be: pinned to this
// node with j's labels and annotations, the same command and version
// (sameJob). Any other Job under the name is an error, with a Warning
// Event: a name this node needs is taken, and the node does not take
// that Job's result for its own. It refuses unless the sync holds the
// work watches (workwatch.go): a Job created while they may close would
// run unseen.
func (a *Agent) createJob(ctx context.Context, ch *v1.UpdateChannel, j *batchv1.Job) error {
	if !a.holdsWork() {
		return fmt.Errorf("job %s: not created without the watches of this node's Jobs open (they open for the next sync)", j.Name)
	}
	confineJob(j, a.opts.Isolation)
	_, err := a.kube.BatchV1().Jobs(j.Namespace).Create(ctx, j, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	have := a.jobCache().anyJob(j.Namespace + "/" + j.Name)
	if have == nil {
		return a.nameTaken(ch, "Job", j.Name, "", false, err)
	}
	return a.nameTaken(ch, "Job", j.Name, sameJob(j, have, a.opts.NodeName), true, err)
}

// nameTaken is what a create of kind ("Job", "Pod") under name that
// answered exists (err) comes to: that very object of this node's (why
// "", err returned: the callers take it for done), or another under the
// name (why says how it differs: an error, with a Warning Event
// <kind>NameTaken; its result is never taken for this node's). Not yet in
// the cache (cached false): an error, looked at again on the retry.
func (a *Agent) nameTaken(ch *v1.UpdateChannel, kind, name, why string, cached bool, err error) error {
	lower := strings.ToLower(kind)
	switch {
	case !cached:
		return fmt.Errorf("%s %s exists but is not in this agent's cache yet; looking again", lower, name)
	case why != "":
		a.recorder.Eventf(a.eventTarget(ch), corev1.EventTypeWarning, kind+"NameTaken",
			"node %s: %s %s exists and is not this node's (%s); the node does not take it for its own", a.opts.NodeName, lower, name, why)
		return fmt.Errorf("%s %s exists and is not the one this node would create (%s): not taken for its own", lower, name, why)
	}
	return err
}

// sameJob says how have differs from the Job want that node's agent
// would create under its name ("" when it does not): its node pin, its
// labels and annotations, its command and version.
func sameJob(want, have *batchv1.Job, node string) string {
	if !protocol.JobOfNode(have, node) {
		return fmt.Sprintf("pinned to node %q", have.Spec.Template.Spec.NodeName)
	}
	for _, m := range []struct {
		what       string
		want, have map[string]string
	}{{"label", want.Labels, have.Labels}, {"annotation", want.Annotations, have.Annotations}} {
		for k, v := range m.want {
			if m.have[k] != v {
				return fmt.Sprintf("%s %s is %q, not %q", m.what, k, m.have[k], v)
			}
		}
	}
	w, h := want.Spec.Template.Spec.Containers, have.Spec.Template.Spec.Containers
	if len(h) != 1 || len(w) != 1 || len(h[0].Args) < 2 || h[0].Args[1] != w[0].Args[1] || protocol.JobArg(have, "--version") != protocol.JobArg(want, "--version") {
		return "another command"
	}
	return ""
}

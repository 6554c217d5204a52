package agent

import (
	"context"
	"fmt"
	"maps"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
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
	PodStage        = JobStage        // stages a release ahead of the slot
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
	for _, kind := range []string{PodUpgrade, PodActivate, PodStage, PodRollbackSlot} {
		j, ok := jobs[kind]
		if !ok {
			return nil, fmt.Errorf("no %s Job to make the slot's Pod of", kind)
		}
		out[kind] = slotPodOf(j)
	}
	return out, nil
}

// slotWorkInPod reports whether this agent runs a slot's work in a Pod of
// its own: under the policy isolation; under the webhook isolation (API
// servers before 1.30) it stays a Job, with no right to create pods
// (manifest.Options.SlotPods says why).
func (a *Agent) slotWorkInPod() bool { return a.opts.Isolation != process.IsolationWebhook }

// slotWorkWord is what a slot's work is here, for what the agent reports.
func (a *Agent) slotWorkWord() string {
	if a.slotWorkInPod() {
		return "pod"
	}
	return "job"
}

// createSlotWork creates the work of slot Job j: its Pod, or the Job
// itself under the webhook isolation. what names it ("pod NAME", "job
// NAME") for the Events and errors.
func (a *Agent) createSlotWork(ctx context.Context, ch *v1.UpdateChannel, j *batchv1.Job) (what string, err error) {
	what = a.slotWorkWord() + " " + j.Name
	if !a.slotWorkInPod() {
		return what, a.createJob(ctx, ch, j)
	}
	return what, a.createSlotPod(ctx, ch, j)
}

// createSlotPod creates the Pod of slot Job j for channel ch (slotPodOf).
// As createJob: when a pod of that name exists already, the create's
// AlreadyExists error is returned (the callers take it for done) only if
// that pod is the one j's would be, a slot Pod of this node with j's
// labels, annotations, command and version; any other pod under the
// name is an error, with a Warning Event. It refuses unless the sync
// holds the work watches (workwatch.go).
func (a *Agent) createSlotPod(ctx context.Context, ch *v1.UpdateChannel, j *batchv1.Job) error {
	if !a.holdsWork() {
		return fmt.Errorf("pod %s: not created without the watches of this node's Jobs and pods open (they open for the next sync)", j.Name)
	}
	confineJob(j, a.opts.Isolation)
	p := slotPodOf(j)
	_, err := a.kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	have := a.jobCache().anyPod(p.Namespace + "/" + p.Name)
	if have == nil {
		return a.nameTaken(ch, "Pod", p.Name, "", false, err)
	}
	return a.nameTaken(ch, "Pod", p.Name, sameSlotPod(j, have, a.opts.NodeName), true, err)
}

// sameSlotPod says how pod have differs from the slot Pod of Job want
// that node's agent would create under its name ("" when it does not).
func sameSlotPod(want *batchv1.Job, have *corev1.Pod, node string) string {
	if !protocol.SlotPodOfNode(have, node) {
		return fmt.Sprintf("bound to node %q, %d owners: not a slot Pod of this node", have.Spec.NodeName, len(have.OwnerReferences))
	}
	return sameJob(want, protocol.JobOfSlotPod(have), node)
}

// slotPodSweepEvery is how often the agent deletes its node's slot Pods
// finished more than jobTTL ago.
const slotPodSweepEvery = time.Hour

// sweepSlotPodsEvery sweeps at start and then every slotPodSweepEvery
// until ctx ends. The sweep at start reads the work watches' pods, open
// and filled at every start: it runs after every reboot, beside the
// slot's end, and a list there would be one more request per node of
// every rollout for the same answer. Later sweeps list: the watches
// close while the node is idle.
func (a *Agent) sweepSlotPodsEvery(ctx context.Context) {
	if !a.slotWorkInPod() {
		return // its slots' Jobs go by their TTL
	}
	pods := a.slotPodsWatched
	for {
		if err := a.sweepSlotPods(ctx, time.Now(), pods); err != nil && ctx.Err() == nil {
			a.log.Warn("could not delete this node's finished slot pods (tried again within the hour)", "err", err)
		}
		pods = a.listSlotPods
		select {
		case <-ctx.Done():
			return
		case <-time.After(slotPodSweepEvery):
		}
	}
}

// sweepSlotPods deletes this node's slot Pods that finished more than
// jobTTL before now, as the TTL controller deletes a finished Job
// (ttlSecondsAfterFinished): a day for their logs to be read. The pods
// come from pods (the work watches' cache, or one list from the API
// server's cache); a delete only for each Pod to go.
func (a *Agent) sweepSlotPods(ctx context.Context, now time.Time, pods func(context.Context) ([]*corev1.Pod, error)) error {
	list, err := pods(ctx)
	if err != nil {
		return err
	}
	for _, p := range list {
		if !slotPodExpired(p, a.opts.NodeName, now) {
			continue
		}
		uid := p.UID
		err := a.kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete finished slot pod %s: %w", p.Name, err)
		}
		a.log.Info("deleted a finished slot pod a day old", "pod", p.Name)
	}
	return nil
}

// slotPodExpired reports whether pod p is a slot Pod of node that
// finished more than jobTTL before now.
func slotPodExpired(p *corev1.Pod, node string, now time.Time) bool {
	if !protocol.SlotPodOfNode(p, node) || p.DeletionTimestamp != nil {
		return false
	}
	done, _, _, at := protocol.JobOutcome(protocol.JobOfSlotPod(p))
	return done && now.Sub(at) > jobTTL*time.Second
}

// listSlotPods lists this node's upgrade pods from the API server's cache.
func (a *Agent) listSlotPods(ctx context.Context) ([]*corev1.Pod, error) {
	list, err := a.kube.CoreV1().Pods(a.opts.Namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0",
		LabelSelector: protocol.LabelAppName + "=" + protocol.LabelAppNameUpgrade + "," + protocol.LabelJobNode + "=" + protocol.LabelValue(a.opts.NodeName)})
	if err != nil {
		return nil, fmt.Errorf("list this node's slot pods: %w", err)
	}
	out := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

// slotPodsWatched are this node's pods in the work watches' cache; listed
// from the API server (listSlotPods) when the watches are closed or not
// filled yet.
func (a *Agent) slotPodsWatched(ctx context.Context) ([]*corev1.Pod, error) {
	w := a.watches
	w.mu.Lock()
	filled := w.open && w.synced()
	pods := w.pods
	w.mu.Unlock()
	if !filled {
		return a.listSlotPods(ctx)
	}
	var out []*corev1.Pod
	for _, o := range pods.List() {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

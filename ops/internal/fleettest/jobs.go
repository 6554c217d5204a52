package fleettest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
)

// The stand-in for the kubelet: the fleet runs each Job its agents create
// as that Job's command would on the node's system directory, and
// reboots a node by restarting its agent on a new boot ID.

// SimReboot stops the agent, changes the boot ID and starts it again.
type SimReboot struct {
	F    *Fleet
	Node string
}

func (r *SimReboot) String() string { return "simulated reboot" }

func (r *SimReboot) Reboot(context.Context) error {
	go r.F.Restart(r.Node, func() {
		_ = os.WriteFile(r.F.BootFile(r.Node), []byte(fmt.Sprintf("boot-%d", time.Now().UnixNano())), 0o644)
	})
	return nil
}

// runJobs plays the kubelet for upgrade Jobs: it swaps the node's system
// directory to the Job's version and marks the Job complete, or fails it.
func (f *Fleet) runJobs(ctx context.Context) {
	w, err := f.Kube.BatchV1().Jobs(f.NS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	defer w.Stop()
	var staging sync.WaitGroup
	defer staging.Wait()
	for ev := range w.ResultChan() {
		j, ok := ev.Object.(*batchv1.Job)
		if !ok || ev.Type != watch.Added || j.Spec.Suspend != nil && *j.Spec.Suspend {
			continue // the Job controller starts no pod of a suspended Job
		}
		f.runWork(ctx, &staging, j, func(fail bool) { finishJob(ctx, f.Kube, j, fail) })
	}
}

// runSlotPods plays the kubelet for the slot Pods the agents create (a
// slot's work runs in a Pod of its own, not a Job): it runs each as the
// Job it stands for and writes the Pod's phase.
func (f *Fleet) runSlotPods(ctx context.Context) {
	w, err := f.Kube.CoreV1().Pods(f.NS).Watch(ctx, metav1.ListOptions{LabelSelector: protocol.LabelAppName + "=" + protocol.LabelAppNameUpgrade})
	if err != nil {
		return
	}
	defer w.Stop()
	var staging sync.WaitGroup
	defer staging.Wait()
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || ev.Type != watch.Added || !protocol.SlotPodOfNode(p, p.Spec.NodeName) {
			continue
		}
		f.runWork(ctx, &staging, protocol.JobOfSlotPod(p), func(fail bool) { finishSlotPod(ctx, f.Kube, p, fail) })
	}
}

// runWork does what Job j's command does on its node, at once or when
// its gate or the staging time says, then finish with whether it failed.
func (f *Fleet) runWork(ctx context.Context, staging *sync.WaitGroup, j *batchv1.Job, finish func(fail bool)) {
	f.Mu.Lock()
	fail, wait := f.FailOn[jobNode(j)], f.StageTime
	f.Mu.Unlock()
	if gate := f.gateOf(j); gate != nil {
		staging.Add(1)
		go func() {
			defer staging.Done()
			select {
			case <-ctx.Done():
			case ok := <-gate:
				finish(!ok || !f.runJob(j, fail))
			}
		}()
		return
	}
	if protocol.ArgAfterFlag(j.Spec.Template.Spec.Containers[0].Args, "--phase") == "stage" && wait > 0 {
		staging.Add(1)
		f.countStaging(+1)
		go func() {
			defer staging.Done()
			select {
			case <-ctx.Done():
				f.countStaging(-1)
			case <-time.After(wait):
				ok := f.runJob(j, fail)
				// Uncounted before its end is written: a Job that
				// starts once this one is seen over is not counted
				// beside it, however late this goroutine runs on.
				f.countStaging(-1)
				finish(!ok)
			}
		}()
		return
	}
	finish(!f.runJob(j, fail))
}

// HoldJobs holds node's slot Jobs (not staging, pruning or rollback Jobs)
// until the returned function is called: true runs the Job, false fails it.
func (f *Fleet) HoldJobs(node string) func(ok bool) {
	gate := make(chan bool, 1)
	f.Mu.Lock()
	if f.held == nil {
		f.held = map[string]chan bool{}
	}
	f.held[node] = gate
	f.Mu.Unlock()
	return func(ok bool) { gate <- ok }
}

// gateOf is the gate j waits at: a slot Job of a held node.
func (f *Fleet) gateOf(j *batchv1.Job) chan bool {
	if j.Annotations[protocol.AnnotationJobAction] != "" {
		return nil // staging, pruning, rollback
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return f.held[jobNode(j)]
}

// jobNode is the node Job j's pod runs on: the one its template is
// pinned to, as the kubelet sees it (not what its labels or annotations say).
func jobNode(j *batchv1.Job) string { return j.Spec.Template.Spec.NodeName }

func (f *Fleet) countStaging(d int) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.stagingNow += d
	f.StagingMost = max(f.StagingMost, f.stagingNow)
}

// runJob does what Job j's command does to its node's system directory
// and reports whether it succeeded.
func (f *Fleet) runJob(j *batchv1.Job, fail bool) bool {
	node := jobNode(j)
	args := j.Spec.Template.Spec.Containers[0].Args
	version := protocol.ArgAfterFlag(args, "--version")
	f.Mu.Lock()
	run := f.RunJob
	f.Mu.Unlock()
	switch {
	case fail:
		return false
	case run != nil:
		return run(j)
	case args[1] == "rollback":
		return f.RunRollback(node, args)
	case args[1] == "prune":
		_, err := upgrade.Prune(context.Background(), upgrade.PruneOptions{SystemDir: f.SystemDir(node),
			LockFile: filepath.Join(f.Root, node, "lock"), Keep: []string{protocol.ArgAfterFlag(args, "--keep")}})
		return err == nil
	case protocol.ArgAfterFlag(args, "--phase") == "stage":
		f.Stage(node, version)
	case protocol.ArgAfterFlag(args, "--phase") == "activate":
		staged, _ := upgrade.Prestaged(f.SystemDir(node))
		if !slices.Contains(staged, version) {
			return false // as `ops upgrade --phase activate` refuses what is not staged
		}
		f.Install(node, version)
	default:
		f.Install(node, version)
	}
	return true
}

// Stage puts version into node's system directory, complete (with the
// marker `ops upgrade --phase stage` writes), moving no link.
func (f *Fleet) Stage(node, version string) {
	l := layout.New(f.SystemDir(node))
	for _, c := range []layout.Component{layout.Rootfs, layout.Kernel} {
		dir := l.VersionDir(c, version)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			f.T.Error(err)
		}
		if err := os.WriteFile(filepath.Join(dir, upgrade.MarkerFile), []byte(`{"release":"`+version+`"}`), 0o644); err != nil {
			f.T.Error(err)
		}
	}
}

func finishJob(ctx context.Context, c kubernetes.Interface, j *batchv1.Job, fail bool) {
	now := metav1.Now()
	j.Status.StartTime = &now
	if fail {
		j.Status.Failed = 1
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "sha256 mismatch", LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "sha256 mismatch", LastTransitionTime: now},
		}
	} else {
		j.Status.Succeeded = 1
		j.Status.CompletionTime = &now
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
	}
	if _, err := c.BatchV1().Jobs(j.Namespace).UpdateStatus(ctx, j, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "finish job %s: %v\n", j.Name, err)
	}
}

// finishSlotPod writes slot Pod p's end as the kubelet would: its
// container terminated (exit code 1 and the reason in its message when
// it failed) and the phase Succeeded or Failed.
func finishSlotPod(ctx context.Context, c kubernetes.Interface, p *corev1.Pod, fail bool) {
	now := metav1.Now()
	p.Status.StartTime = &now
	p.Status.Phase = corev1.PodSucceeded
	t := &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: now, FinishedAt: now}
	if fail {
		p.Status.Phase = corev1.PodFailed
		t.ExitCode, t.Reason, t.Message = 1, "Error", "sha256 mismatch"
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: t}}}
	if _, err := c.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "finish slot pod %s: %v\n", p.Name, err)
	}
}

// JobsByAction lists the fleet's Jobs: slot upgrade Jobs (and the Jobs
// the slot Pods stand for), staging Jobs and pruning Jobs, each by node.
func (f *Fleet) JobsByAction() (slots, stages, prunes map[string][]batchv1.Job) {
	f.T.Helper()
	list, err := f.Kube.BatchV1().Jobs(f.NS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	pods, err := f.Kube.CoreV1().Pods(f.NS).List(context.Background(), metav1.ListOptions{LabelSelector: protocol.LabelAppName + "=" + protocol.LabelAppNameUpgrade})
	if err != nil {
		f.T.Fatal(err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; protocol.SlotPodOfNode(p, p.Spec.NodeName) {
			list.Items = append(list.Items, *protocol.JobOfSlotPod(p))
		}
	}
	slots, stages, prunes = map[string][]batchv1.Job{}, map[string][]batchv1.Job{}, map[string][]batchv1.Job{}
	for _, j := range list.Items {
		node := j.Annotations[protocol.AnnotationJobNode]
		switch j.Annotations[protocol.AnnotationJobAction] {
		case protocol.JobActionStage:
			stages[node] = append(stages[node], j)
		case protocol.JobActionPrune:
			prunes[node] = append(prunes[node], j)
		case "":
			slots[node] = append(slots[node], j)
		}
	}
	return slots, stages, prunes
}

// failRollbacks: node -> how many of its rollback Jobs still fail.
var FailRollbacks sync.Map

// RunRollback runs a rollback Job's command on node's system directory:
// the real `ops rollback` of the components the Job names, or a failure.
func (f *Fleet) RunRollback(node string, args []string) bool {
	if n, ok := FailRollbacks.Load(node); ok && n.(int) > 0 {
		FailRollbacks.Store(node, n.(int)-1)
		return false
	}
	var comps []layout.Component
	for _, c := range layout.Components {
		if slices.Contains(args, "--"+protocol.ComponentFlag[c]+"=true") {
			comps = append(comps, c)
		}
	}
	if len(comps) == 0 {
		f.T.Errorf("rollback Job of %s names no component: %v", node, args)
		return false
	}
	from := map[layout.Component]string{}
	for i, a := range args {
		if a == "--from" && i+1 < len(args) {
			name, v, _ := strings.Cut(args[i+1], "=")
			for c, flag := range protocol.ComponentFlag {
				if flag == name {
					from[c] = v
				}
			}
		}
	}
	_, err := upgrade.Rollback(context.Background(), upgrade.RollbackOptions{SystemDir: f.SystemDir(node), Components: comps,
		LockFile: filepath.Join(f.Root, node, "lock"), From: from})
	if err != nil {
		f.T.Errorf("rollback of %s: %v", node, err)
	}
	return err == nil
}

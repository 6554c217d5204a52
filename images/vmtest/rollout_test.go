//go:build vmnode

package vmtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
)

// rollout follows one node's upgrade from the API: what it saw, in order.
type rollout struct {
	n        *node
	start    time.Time
	seen     []string
	bootID   string
	cordoned bool
	rebooted bool
}

func (w *rollout) note(what string) {
	for _, s := range w.seen {
		if strings.HasPrefix(s, what+" ") {
			return
		}
	}
	w.seen = append(w.seen, fmt.Sprintf("%s @%.0fs", what, time.Since(w.start).Seconds()))
	w.n.g.t.Logf("rollout: %s", w.seen[len(w.seen)-1])
}

// follow polls until the node was cordoned, rebooted (its boot ID changed),
// is Ready and schedulable again and the channel is Complete; a failed
// upgrade Pod (or Job) ends it with the pod's exit and log.
func (w *rollout) follow(ctx context.Context, d time.Duration) error {
	w.start = time.Now()
	for time.Since(w.start) < d {
		done, err := w.poll(ctx)
		if done || err != nil {
			return err
		}
		time.Sleep(3 * time.Second)
	}
	return fmt.Errorf("rollout not done after %s; seen: %s", d, strings.Join(w.seen, ", "))
}

func (w *rollout) poll(ctx context.Context) (bool, error) {
	cs := w.n.cs
	jobs, err := cs.BatchV1().Jobs("slipway-system").List(ctx, metav1.ListOptions{})
	if err == nil {
		for i := range jobs.Items {
			j := &jobs.Items[i]
			w.note("job " + j.Name + " created")
			if c := jobCondition(j); c != "" {
				w.note("job " + j.Name + " " + c)
				if c == string(batchv1.JobFailed) {
					return false, w.jobFailed(ctx, j)
				}
			}
		}
	}
	// The slot's upgrade runs in a Pod of its own, the Job it stands for.
	pods, err := cs.CoreV1().Pods("slipway-system").List(ctx, metav1.ListOptions{LabelSelector: protocol.LabelAppName + "=" + protocol.LabelAppNameUpgrade})
	if err == nil {
		for i := range pods.Items {
			if p := &pods.Items[i]; protocol.SlotPodOfNode(p, vmNodeName) {
				if err := w.slotPod(ctx, protocol.JobOfSlotPod(p)); err != nil {
					return false, err
				}
			}
		}
	}
	nd, err := cs.CoreV1().Nodes().Get(ctx, vmNodeName, metav1.GetOptions{})
	if err != nil {
		return false, nil
	}
	if w.bootID == "" {
		w.bootID = nd.Status.NodeInfo.BootID
	} else if nd.Status.NodeInfo.BootID != w.bootID {
		w.rebooted = true
		w.note("node rebooted")
	}
	if nd.Spec.Unschedulable {
		w.cordoned = true
		w.note("node cordoned")
	}
	ready := testenv.NodeReady(nd)
	if !ready {
		w.note("node NotReady")
	}
	complete, _ := w.n.kubectl(ctx, "-n", "slipway-system", "get", "upchan", "default",
		"-o", `jsonpath={.status.conditions[?(@.type=="Complete")].status}`)
	if strings.TrimSpace(complete) == "True" {
		w.note("channel Complete")
	}
	return w.cordoned && w.rebooted && ready && !nd.Spec.Unschedulable && strings.TrimSpace(complete) == "True", nil
}

// slotPod notes the slot Pod j stands for and how it ended; its failure
// ends the rollout with its exit and log.
func (w *rollout) slotPod(ctx context.Context, j *batchv1.Job) error {
	w.note("pod " + j.Name + " created")
	c := jobCondition(j)
	if c == "" {
		return nil
	}
	w.note("pod " + j.Name + " " + c)
	if c != string(batchv1.JobFailed) {
		return nil
	}
	log, _ := w.n.g.run("tail -n 15 /var/log/pods/"+j.Namespace+"_"+j.Name+"_*/*/*.log | cut -c1-300", time.Minute)
	return fmt.Errorf("upgrade pod %s failed: %s; its log:\n%s", j.Name, j.Status.Conditions[0].Message, log)
}

func jobCondition(j *batchv1.Job) string {
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return string(c.Type)
		}
	}
	return ""
}

// jobFailed says how the Job's pod ended and what it printed (read on the
// node: the apiserver cannot reach the VM's kubelet for logs).
func (w *rollout) jobFailed(ctx context.Context, j *batchv1.Job) error {
	pods, err := w.n.cs.CoreV1().Pods(j.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + j.Name})
	exit := "no pod"
	if err == nil {
		for _, p := range pods.Items {
			for _, st := range p.Status.ContainerStatuses {
				if x := st.State.Terminated; x != nil {
					exit = fmt.Sprintf("pod %s exited %d (%s)", p.Name, x.ExitCode, x.Reason)
				}
			}
		}
	}
	log, _ := w.n.g.run("tail -n 15 /var/log/pods/"+j.Namespace+"_"+j.Name+"*/*/*.log | cut -c1-300", time.Minute)
	return fmt.Errorf("upgrade job %s failed: %s; its log:\n%s", j.Name, exit, log)
}

// podWaiting is a pod's first waiting reason, for progress messages.
func podWaiting(p *corev1.Pod) string {
	for _, st := range p.Status.ContainerStatuses {
		if w := st.State.Waiting; w != nil {
			return "(" + w.Reason + ": " + w.Message + ")"
		}
	}
	return ""
}

func writeFile(path string, b []byte) error {
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

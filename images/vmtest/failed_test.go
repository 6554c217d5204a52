//go:build vmnode

package vmtest

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"slipway.dev/slipway/images/build"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
)

// TestFailedUpgradeRollsBackRealNode: a workload on the node guarded by a
// PodDisruptionBudget that never allows an eviction. The upgrade Job swaps
// v2 in, the drain fails after drain.timeout, the agent uncordons, records
// the failure (the channel Degraded at maxFailures 1) and runs its rollback
// Job on the real node; a power reset (qemu system_reset) then boots the
// old version, v1, and the node comes back on it.
func TestFailedUpgradeRollsBackRealNode(t *testing.T) {
	s := &stepTimer{t: t, start: time.Now()}
	defer s.report()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	mirror := &mirrorServer{}
	port := mirror.start(t)
	n := startNode(t, s, ctx, mirrorAddr+"="+hostFromGuest+":"+strconv.Itoa(port), plainNode)
	mirror.dir = n.img.Mirror
	if err := n.cs.CoreV1().Nodes().Delete(ctx, n.env.Nodes[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.step("guarded workload runs", func() error { return n.guardedWorkload(ctx) })
	s.step("apply ops manifest", func() error { return n.applyManifest(ctx) })
	s.step("agent pod runs", func() error { return n.agentRunning(ctx, 8*time.Minute) })
	s.step("channel to latest, drain 20s, maxFailures 1", func() error {
		_, err := n.kubectl(ctx, "-n", "slipway-system", "patch", "upchan", "default", "--type=merge",
			"-p", `{"spec":{"version":"latest","paused":false,"maxFailures":1,"drain":{"timeout":"20s"}}}`)
		return err
	})
	s.step("drain failed, channel Degraded", func() error { return n.channelDegraded(ctx, 15*time.Minute) })
	s.step("rollback Job Complete", func() error { return n.rollbackDone(ctx, 10*time.Minute) })
	s.step("pause the channel", func() error {
		_, err := n.kubectl(ctx, "-n", "slipway-system", "patch", "upchan", "default", "--type=merge", "-p", `{"spec":{"paused":true}}`)
		return err
	})
	s.step("system dir: v1 current again", func() error {
		out, err := n.g.run(`echo "[$(readlink /k3os/system/k3os/current)]"`, time.Minute)
		if m := regexp.MustCompile(`\[(v\d+)\]`).FindStringSubmatch(out); err == nil && (m == nil || m[1] != "v1") {
			err = fmt.Errorf("k3os/current after the rollback, want v1:\n%s", out)
		}
		return err
	})
	nd, err := n.cs.CoreV1().Nodes().Get(ctx, vmNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.step("power reset", func() error { _, err := n.mon.Do("system_reset", 10*time.Second); return err })
	s.step("console: v1 booted", func() error { return n.g.wait(5*time.Minute, n.g.booted("boot", "v1")...) })
	s.step("node back on a new boot, Ready on v1, schedulable", func() error {
		return n.backOn(ctx, "v1", nd.Status.NodeInfo.BootID, 10*time.Minute)
	})
	s.step("node runs v1's kernel (uname -r)", func() error { return n.runsKernelOf(ctx, "v1", time.Minute) })
}

// guardedWorkload runs a pause pod on the node with a PDB that never
// allows its eviction.
func (n *node) guardedWorkload(ctx context.Context) error {
	lbl := map[string]string{"app": "guarded"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default", Labels: lbl},
		Spec: corev1.PodSpec{NodeName: vmNodeName, HostNetwork: true, Containers: []corev1.Container{{
			Name: "pause", Image: build.PauseImage, ImagePullPolicy: corev1.PullNever}}}}
	if _, err := n.cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: lbl}}}
	if _, err := n.cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		return err
	}
	return poll(ctx, 5*time.Minute, "the guarded pod Running and its PDB allowing no disruption", func() (bool, error) {
		p, err := n.cs.CoreV1().Pods("default").Get(ctx, "guarded", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		b, err := n.cs.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "guarded", metav1.GetOptions{})
		return err == nil && b.Status.ObservedGeneration == b.Generation && b.Status.CurrentHealthy == 1 && b.Status.DisruptionsAllowed == 0, nil
	})
}

// channelDegraded waits for the node's failure in the channel's status and
// the Degraded condition.
func (n *node) channelDegraded(ctx context.Context, d time.Duration) error {
	return poll(ctx, d, "the node's failure recorded and the channel Degraded", func() (bool, error) {
		out, _ := n.kubectl(ctx, "-n", "slipway-system", "get", "upchan", "default", "-o",
			`jsonpath={.status.failed[*].node} {.status.conditions[?(@.type=="Degraded")].status}`)
		return strings.Contains(out, vmNodeName) && strings.HasSuffix(strings.TrimSpace(out), "True"), nil
	})
}

// rollbackDone waits for a rollback Job of the node to complete.
func (n *node) rollbackDone(ctx context.Context, d time.Duration) error {
	return poll(ctx, d, "a rollback Job Complete", func() (bool, error) {
		jobs, err := n.cs.BatchV1().Jobs("slipway-system").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i := range jobs.Items {
			j := &jobs.Items[i]
			if j.Annotations["ops.slipway.dev/action"] != "rollback" {
				continue
			}
			switch jobCondition(j) {
			case string(batchv1.JobComplete):
				n.g.t.Logf("rollback job %s: %v", j.Name, j.Spec.Template.Spec.Containers[0].Args)
				return true, nil
			case string(batchv1.JobFailed):
				return false, (&rollout{n: n}).jobFailed(ctx, j)
			}
		}
		return false, nil
	})
}

// backOn waits for the node Ready, schedulable, on rootfs version v, on a
// boot other than oldBoot.
func (n *node) backOn(ctx context.Context, v, oldBoot string, d time.Duration) error {
	return poll(ctx, d, "the node Ready, schedulable, labelled "+v, func() (bool, error) {
		nd, err := n.cs.CoreV1().Nodes().Get(ctx, vmNodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		oc, err := versioned.NewForConfig(n.env.Config)
		if err != nil {
			return false, err
		}
		u, err := oc.OpsV1().NodeUpdates("slipway-system").Get(ctx, protocol.NodeUpdateName(vmNodeName), metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, nil
		} else if err != nil {
			u = nil
		}
		booted, _ := protocol.PublishedVersions(nd.Annotations, u) // the boot the agent recorded its versions in
		return nd.Status.NodeInfo.BootID != oldBoot && testenv.NodeReady(nd) && !nd.Spec.Unschedulable &&
			nd.Labels["ops.slipway.dev/rootfs-version"] == v && booted.BootID == nd.Status.NodeInfo.BootID, nil
	})
}

// poll calls cond every 3 s until it is true, fails, or d passed.
func poll(ctx context.Context, d time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(3 * time.Second):
		}
	}
	return fmt.Errorf("no %s after %s", what, d)
}

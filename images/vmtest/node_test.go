//go:build vmnode

package vmtest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"slipway.dev/slipway/images/build"
)

// TestNodeJoinsAndRunsPods boots a VM that is a real Kubernetes node: the
// kubelet (v1.36.3, built from the tools module) and Debian's containerd,
// runc and CNI plugins, joined to a control plane on this machine's
// loopback through qemu's user networking, its system directory read-only
// as on k3os. The Node must turn Ready and a hostNetwork pod of slipway's
// own image (the OCI archive `make image-oci` writes, imported on the node)
// must run to completion, and the four systems' charts installed with that
// image must run every controller and agent Ready on the node.
func TestNodeJoinsAndRunsPods(t *testing.T) {
	s := &stepTimer{t: t, start: time.Now()}
	defer s.report()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	n := startNode(t, s, ctx, "", plainNode)
	s.step("hostNetwork pod runs", func() error { return runPod(ctx, n.cs, 5*time.Minute) })
	n.chartsRun(ctx, s)
}

// readOnly checks that /k3os/system refuses writes, as on k3os.
func (g *guest) readOnly() error {
	out, err := g.run("touch /k3os/system/probe 2>&1; grep ' /k3os/system ' /proc/mounts", time.Minute)
	if err != nil {
		return err
	}
	if !strings.Contains(out, "Read-only file system") || !strings.Contains(out, " ro,") {
		return fmt.Errorf("/k3os/system is writable:\n%s", out)
	}
	return nil
}

// nodeReady waits for the VM's Node to be Ready, calling progress every
// 30 s while it is not.
func nodeReady(ctx context.Context, cs kubernetes.Interface, d time.Duration, progress func()) error {
	var last string
	next := time.Now().Add(30 * time.Second)
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, d, true, func(ctx context.Context) (bool, error) {
		if time.Now().After(next) {
			progress()
			next = time.Now().Add(30 * time.Second)
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, vmNodeName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				last = fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready: %w (last: %s)", vmNodeName, err, last)
	}
	return nil
}

// runPod runs `slipway version` from the imported image on the VM node.
func runPod(ctx context.Context, cs kubernetes.Interface, d time.Duration) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "slipway-version", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: vmNodeName, HostNetwork: true, RestartPolicy: corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "version", Image: build.SlipwayImage,
				ImagePullPolicy: corev1.PullNever, Args: []string{"version"}}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod: %w", err)
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, d, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = string(p.Status.Phase)
		for _, st := range p.Status.ContainerStatuses {
			if w := st.State.Waiting; w != nil {
				last += " waiting " + w.Reason + ": " + w.Message
			}
			if x := st.State.Terminated; x != nil {
				last += " exit " + strconv.Itoa(int(x.ExitCode)) + " " + x.Reason
			}
		}
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod failed: %s", last)
		}
		return p.Status.Phase == corev1.PodSucceeded, nil
	})
	if err != nil {
		return fmt.Errorf("pod %s: %w (last: %s)", pod.Name, err, last)
	}
	return nil
}

// kubeletTail logs the last lines of the kubelet's log.
func (g *guest) kubeletTail() {
	out, err := g.run("tail -n 6 /var/log/kubelet.log | cut -c1-400", time.Minute)
	g.t.Logf("kubelet log (%v):\n%s", err, out)
}

// dumpNode logs the node's logs from the console after a failure.
func dumpNode(g *guest) {
	for _, f := range []string{"/var/log/containerd.log", "/var/log/kubelet.log"} {
		out, err := g.run("tail -n 40 "+f, time.Minute)
		g.t.Logf("%s (%v):\n%s", f, err, out)
	}
}

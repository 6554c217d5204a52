//go:build vmnode

package vmtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	"slipway.dev/slipway/ops/testenv"
)

// TestNodeJoinsAndRunsPods boots a VM that is a real Kubernetes node: the
// kubelet (v1.36.3, built from the tools module) and Debian's containerd,
// runc and CNI plugins, joined to a control plane on this machine's
// loopback through qemu's user networking, its system directory read-only
// as on k3os. The Node must turn Ready and a hostNetwork pod of slipway's
// own image (an OCI archive imported on the node) must run to completion.
func TestNodeJoinsAndRunsPods(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	s := &stepTimer{t: t, start: time.Now()}
	defer s.report()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	var env *testenv.Env
	s.step("start control plane", func() (err error) {
		env, err = testenv.Start(ctx, testenv.Options{Cluster: true, Nodes: 1})
		return err
	})
	defer env.Stop()
	bin, kubelet := filepath.Join(dir, "slipway"), ""
	s.step("build slipway", func() error { return buildSlipway(root, bin) })
	s.step("build kubelet", func() (err error) { kubelet, err = kubeletBinary(root); return err })
	var img *build.Result
	var disk string
	s.step("build images and node disk", func() (err error) { img, disk, err = nodeImages(root, dir, bin, kubelet); return err })
	kc := filepath.Join(dir, "kubelet.conf")
	s.step("kubelet credentials", func() error { return kubeletKubeconfig(ctx, env, kc) })
	accel := os.Getenv("SLIPWAY_QEMU_ACCEL")
	s.step("probe accelerator", func() (err error) { accel, err = probe(t, root, accel, img); return err })
	g := &guest{t: t, ctx: ctx, k: img.KernelVersions}
	g.c = startVM(t, ctx, root, dir, accel, "--memory", "2048", "--",
		"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0",
		"-fw_cfg", "name=opt/slipway/kubeconfig,file="+kc,
		"-fw_cfg", "name=opt/slipway/node-name,string="+vmNodeName,
		"-drive", "file="+disk+",format=raw,if=virtio,readonly=on")
	defer func() {
		if t.Failed() {
			dumpNode(g)
		}
	}()
	s.step("boot v1", func() error { return g.wait(5*time.Minute, g.booted("boot", "v1")...) })
	s.step("system dir read-only", g.readOnly)
	s.step("containerd and images", func() error {
		return g.wait(5*time.Minute, re(`slipway-node: images imported: .*%s`, build.SlipwayImage), re(`slipway-node: kubelet started`))
	})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	s.step("node Ready", func() error { return nodeReady(ctx, cs, 6*time.Minute, g.kubeletTail) })
	s.step("hostNetwork pod runs", func() error { return runPod(ctx, cs, 5*time.Minute) })
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

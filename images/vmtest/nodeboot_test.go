//go:build vmnode

package vmtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/images/build"
	"slipway.dev/slipway/ops/testenv"
)

// node is a running real-node VM and the control plane it joined.
type node struct {
	root, dir string
	env       *testenv.Env
	cs        kubernetes.Interface
	g         *guest
	img       *build.Result
	bin       string   // the slipway binary inside the images
	mon       *Monitor // qemu's monitor: power resets
}

// flavour is the node's init: busybox init alone starting the node
// (plain), k3os's inittab handing the services to OpenRC (k3os), or
// systemd as PID 1 starting them as units (systemd).
type flavour string

const (
	plainNode   flavour = ""
	k3osNode    flavour = "k3os"
	systemdNode flavour = "systemd"
)

// startNode starts the control plane, builds the images and the node disk,
// boots the VM at v1 and waits until its Node is Ready. forward adds
// LISTEN=TARGET pairs to the guest's loopfwd beside the kubernetes Service.
func startNode(t *testing.T, s *stepTimer, ctx context.Context, forward string, fl flavour) *node {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{root: root, dir: t.TempDir()}
	s.step("start control plane", func() (err error) {
		n.env, err = testenv.Start(ctx, testenv.Options{Cluster: true, Nodes: 1})
		return err
	})
	t.Cleanup(n.env.Stop)
	if n.cs, err = kubernetes.NewForConfig(n.env.Config); err != nil {
		t.Fatal(err)
	}
	n.bin = filepath.Join(n.dir, "slipway")
	kubelet, disk := "", ""
	s.step("build slipway", func() error { return buildSlipway(root, n.bin) })
	s.step("build kubelet", func() (err error) { kubelet, err = kubeletBinary(root); return err })
	s.step("build images and node disk", func() (err error) { n.img, disk, err = nodeImages(root, n.dir, n.bin, kubelet, fl); return err })
	kc := filepath.Join(n.dir, "kubelet.conf")
	s.step("kubelet credentials", func() error { return kubeletKubeconfig(ctx, n.env, kc) })
	accel := os.Getenv("SLIPWAY_QEMU_ACCEL")
	s.step("probe accelerator", func() (err error) { accel, err = probe(t, root, accel, n.img); return err })
	u, err := url.Parse(n.env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	forward = "10.96.0.1:443=" + hostFromGuest + ":" + u.Port() + " " + forward
	n.g = &guest{t: t, ctx: ctx, k: n.img.KernelVersions}
	// busybox's banner: the console shell started (after OpenRC's default
	// runlevel on the k3os-like node, after its unit on the systemd node).
	n.g.ready = []*regexp.Regexp{regexp.MustCompile(`built-in shell \(ash\)`)}
	sock := filepath.Join(n.dir, "monitor.sock")
	n.mon = NewMonitor(sock)
	n.g.c = startVM(t, ctx, root, n.dir, accel, "--memory", "2048", "--",
		"-monitor", "unix:"+sock+",server=on,wait=off",
		"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0",
		"-fw_cfg", "name=opt/slipway/kubeconfig,file="+kc,
		"-fw_cfg", "name=opt/slipway/node-name,string="+vmNodeName,
		"-fw_cfg", "name=opt/slipway/forward,string="+forward,
		"-drive", "file="+disk+",format=raw,if=virtio,readonly=on")
	t.Cleanup(func() {
		if t.Failed() {
			dumpNode(n.g)
		}
	})
	g := n.g
	s.step("boot v1", func() error { return g.wait(5*time.Minute, g.booted("boot", "v1")...) })
	s.step("system dir read-only", g.readOnly)
	if fl == k3osNode { // OpenRC's default runlevel ran before the console shell started
		s.step("OpenRC started containerd and the kubelet", g.openRCStarted)
	} else {
		s.step("containerd and images", func() error {
			return g.wait(5*time.Minute, re(`slipway-node: images imported: .*%s`, build.SlipwayImage), re(`slipway-node: kubelet started`))
		})
	}
	s.step("node Ready", func() error { return nodeReady(ctx, n.cs, 6*time.Minute, g.kubeletTail) })
	s.step("node runs v1's kernel, which is not v2's", func() error {
		if n.img.KernelABIs["v1"] == n.img.KernelABIs["v2"] {
			return fmt.Errorf("v1 and v2 carry the same kernel %s: the upgrade would not show in uname -r", n.img.KernelABIs["v1"])
		}
		t.Logf("kernels: v1 %s, v2 %s", n.img.KernelABIs["v1"], n.img.KernelABIs["v2"])
		return n.runsKernelOf(ctx, "v1", time.Minute)
	})
	return n
}

// runsKernelOf waits until the kubelet reports release v's kernel as the
// Node's (nodeInfo.kernelVersion is uname -r on the node).
func (n *node) runsKernelOf(ctx context.Context, v string, d time.Duration) error {
	want, last := n.img.KernelABIs[v], ""
	err := poll(ctx, d, "kernel "+want+" ("+v+") on the Node", func() (bool, error) {
		nd, err := n.cs.CoreV1().Nodes().Get(ctx, vmNodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = nd.Status.NodeInfo.KernelVersion
		return last == want, nil
	})
	if err != nil {
		return fmt.Errorf("%w: the Node says %q", err, last)
	}
	return nil
}

// openRCStarted checks that OpenRC started the k3os-like node's services.
func (g *guest) openRCStarted() error {
	out, err := g.run("echo started: $(ls /run/openrc/started)", time.Minute)
	if err != nil {
		return err
	}
	for _, svc := range []string{"confirm-boot", "system-ro", "node-setup", "containerd", "kubelet"} {
		if !strings.Contains(out, " "+svc) {
			return fmt.Errorf("OpenRC did not start %s:\n%s", svc, out)
		}
	}
	return nil
}

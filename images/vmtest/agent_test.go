//go:build vmnode

package vmtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/images/build"
	"slipway.dev/slipway/ops/manifest"
)

// mirrorAddr is where pods on the VM find the release mirror (loopfwd on
// the guest forwards it to the test's HTTP server on the host's loopback).
const mirrorAddr = "10.96.0.2:80"

// TestAgentUpgradesRealNode applies `slipway ops manifest` to the control
// plane the VM joined, sets the default channel to latest (v2, served over
// HTTP from the test's mirror), and follows the real agent on the real
// kubelet: the upgrade Job, the drain, the reboot into v2's kernel and
// rootfs, the node back Ready and uncordoned, the channel Complete. The
// node's PID 1 is busybox init: the agent sends it SIGTERM, and busybox
// init runs its ::shutdown: actions (the node's stop) before rebooting.
func TestAgentUpgradesRealNode(t *testing.T) {
	agentUpgradesNode(t, plainNode, shutdownRan)
}

// TestAgentRebootsK3osNode is the same on a k3os-like node: busybox init
// as PID 1 with k3os's inittab, OpenRC (Debian's) as the service manager,
// containerd and the kubelet started by OpenRC services. The agent reboots
// it as k3os's own reboot does (SIGTERM to busybox init); OpenRC's
// shutdown stops the kubelet, then containerd, through their services,
// whose stop functions write the markers read here, before the kernel
// restarts; the node comes back on v2.
func TestAgentRebootsK3osNode(t *testing.T) {
	agentUpgradesNode(t, k3osNode, []*regexp.Regexp{
		regexp.MustCompile(`(?s)k3os-node: kubelet stopped by its OpenRC service.*k3os-node: containerd stopped by its OpenRC service.*reboot: Restarting system`),
	})
}

// TestAgentRebootsSystemdNode is the same on a node whose PID 1 is
// Debian's systemd, containerd and the kubelet its units, D-Bus and logind
// running: the default DaemonSet (no host socket in its pod) sends
// SIGRTMIN+5 to PID 1, on which systemd starts reboot.target; it stops the kubelet, then
// containerd, through their units (whose ExecStop lines write the markers
// read here) before the kernel restarts; the node comes back on v2.
func TestAgentRebootsSystemdNode(t *testing.T) {
	agentUpgradesNode(t, systemdNode, []*regexp.Regexp{
		regexp.MustCompile(`(?s)systemd-node: kubelet stopped by its unit.*systemd-node: containerd stopped by its unit.*reboot: Restarting system`),
	})
}

func agentUpgradesNode(t *testing.T, fl flavour, shutdown []*regexp.Regexp) {
	s := &stepTimer{t: t, start: time.Now()}
	defer s.report()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	mirror := &mirrorServer{}
	port := mirror.start(t)
	n := startNode(t, s, ctx, mirrorAddr+"="+hostFromGuest+":"+strconv.Itoa(port), fl)
	mirror.dir = n.img.Mirror
	// The simulated node would never run a real agent: only the VM counts.
	if err := n.cs.CoreV1().Nodes().Delete(ctx, n.env.Nodes[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.step("apply ops manifest", func() error { return n.applyManifest(ctx, manifestFlags(fl)...) })
	s.step("agent pod runs", func() error { return n.agentRunning(ctx, 8*time.Minute) })
	s.step("watch the agent's reboot", func() error { return n.g.watchAgentReboot(fl) })
	s.step("channel to latest", func() error {
		_, err := n.kubectl(ctx, "-n", "slipway-system", "patch", "upchan", "default", "--type=merge",
			"-p", `{"spec":{"version":"latest","paused":false}}`)
		return err
	})
	w := &rollout{n: n}
	s.step("job, drain, reboot, uncordon, Complete", func() error { return w.follow(ctx, 20*time.Minute) })
	s.step("agent rebooted the node through its init, its shutdown ran", func() error { return n.g.agentRebooted(fl, shutdown...) })
	s.step("console: v2 booted", func() error { return n.g.wait(time.Minute, n.g.booted("try", "v2")...) })
	s.step("node runs v2's kernel (uname -r)", func() error { return n.runsKernelOf(ctx, "v2", 5*time.Minute) })
	s.step("system dir read-only again", n.g.readOnly)
	t.Logf("rollout: %s", strings.Join(w.seen, ", "))
}

// mirrorServer serves the releases as an http channel: <base>/latest
// answers the newest version, <base>/download/<v>/<artifact> the files.
type mirrorServer struct{ dir string }

func (m *mirrorServer) start(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/releases/latest", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "v2") })
	mux.HandleFunc("/releases/download/", func(w http.ResponseWriter, r *http.Request) {
		http.StripPrefix("/releases/download/", http.FileServer(http.Dir(m.dir))).ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// kubectl runs the control plane's kubectl against the test cluster.
func (n *node) kubectl(ctx context.Context, args ...string) (string, error) {
	tools, err := exec.Command(filepath.Join(n.root, "scripts", "install-tools"), "--print").Output()
	if err != nil {
		return "", fmt.Errorf("install-tools --print: %w", err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(strings.TrimSpace(string(tools)), "kubectl"),
		append([]string{"--kubeconfig", n.env.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// manifestFlags are the manifest's flags for a node of flavour fl: none,
// the systemd node included (its agent reaches no host socket).
func manifestFlags(flavour) []string { return nil }

func (n *node) applyManifest(ctx context.Context, flags ...string) error {
	args := append([]string{"ops", "manifest", "--image", build.SlipwayImage,
		"--channel-url", "http://" + strings.TrimSuffix(mirrorAddr, ":80") + "/releases"}, flags...)
	m, err := exec.CommandContext(ctx, n.bin, args...).Output()
	if err != nil {
		return fmt.Errorf("slipway ops manifest: %w", err)
	}
	f := filepath.Join(n.dir, "manifest.yaml")
	if err := writeFile(f, m); err != nil {
		return err
	}
	// The manifest holds the CRD and the default channel: kubectl maps the
	// channel only once the CRD is established, so a first apply creates
	// the CRD and a second, after the wait, the channel.
	if _, err := n.kubectl(ctx, "apply", "--server-side", "-f", f); err == nil {
		return nil
	}
	if _, err := n.kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/updatechannels.ops.slipway.dev"); err != nil {
		return err
	}
	_, err = n.kubectl(ctx, "apply", "--server-side", "-f", f)
	return err
}

// agentRunning waits for the agent DaemonSet's pod on the VM to be Running
// (the controller Deployment's pods run there too: the VM is the only node).
func (n *node) agentRunning(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		pods, err := n.cs.CoreV1().Pods("slipway-system").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + vmNodeName,
			LabelSelector: "app.kubernetes.io/name=" + manifest.AgentName})
		if err == nil {
			last = ""
			for _, p := range pods.Items {
				last += p.Name + "=" + string(p.Status.Phase) + podWaiting(&p) + " "
				if p.Status.Phase == "Running" {
					return nil
				}
			}
		}
		time.Sleep(3 * time.Second)
	}
	return fmt.Errorf("no agent pod Running on %s after %s: %s", vmNodeName, d, last)
}

// agentRebooting is the agent's log line when it reboots the VM. Where
// PID 1 is busybox init (/proc/1/comm "init": started as /sbin/init, as
// real k3os starts it; no control FIFO of
// openrc-init or sysvinit in /run), `auto` sends it SIGTERM, on which
// busybox init runs its ::shutdown: actions and reboots; where it is
// systemd, `auto` sends SIGRTMIN+5 to PID 1 (the pod has no system bus).
func agentRebooting(fl flavour) *regexp.Regexp {
	if fl == systemdNode {
		return regexp.MustCompile(`msg=rebooting .*method="systemd \(SIGRTMIN\+5 to PID 1\)"`)
	}
	return regexp.MustCompile(`msg=rebooting .*method="busybox-init \(SIGTERM to PID 1\)"`)
}

// shutdownRan is what the console shows when busybox init ran inittab's
// ::shutdown: actions: the node's stop (kubelet and containerd), then its
// own reboot.
var shutdownRan = []*regexp.Regexp{regexp.MustCompile(`slipway-node: stopped kubelet containerd`), regexp.MustCompile(`reboot: Restarting system`)}

// watchAgentReboot checks that the guest's PID 1 is the init the agent
// must tell (busybox init, with OpenRC's /run/openrc on the k3os node, and
// no control FIFO of openrc-init or sysvinit; or systemd with its
// /run/systemd/system and the system bus), and copies the agent's reboot
// lines from its container log to the console, where the test reads them
// (the apiserver cannot reach the VM's kubelet for logs, and the log is on
// a tmpfs the reboot clears).
func (g *guest) watchAgentReboot(fl flavour) error {
	out, err := g.run("echo pid1=$(cat /proc/1/comm) fifos=$(ls /run/openrc/init.ctl /run/initctl 2>/dev/null | wc -l) openrc=$(ls -d /run/openrc 2>/dev/null | wc -l) systemd=$(ls -d /run/systemd/system 2>/dev/null | wc -l) bus=$(ls /run/dbus/system_bus_socket 2>/dev/null | wc -l)", time.Minute)
	if err != nil {
		return err
	}
	m := regexp.MustCompile(`pid1=(\S+) fifos=(\d+) openrc=(\d+) systemd=(\d+) bus=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		return fmt.Errorf("the guest did not say what its PID 1 is:\n%s", out)
	}
	want := []string{"init", "0", "0", "0", "0"} // exec'd as /sbin/init, as k3os does
	switch fl {
	case k3osNode:
		want[2] = "1"
	case systemdNode: // systemd serves sysvinit's /run/initctl too (systemd-initctl.socket)
		want = []string{"systemd", m[2], "0", "1", "1"}
	}
	if m == nil || !slices.Equal(m[1:], want) {
		return fmt.Errorf("the guest's PID 1 and /run are not the %q node's (pid1 fifos openrc systemd bus = %v):\n%s", fl, want, out)
	}
	// The agent's log files are looked for again every second: a glob taken
	// once would miss the log of an agent container restarted (or a pod
	// replaced) before the reboot. The agent logs the line rebootDelay (5 s)
	// before it reboots.
	_, err = g.run(`(while :; do for f in /var/log/pods/slipway-system_slipway-agent-*/agent/*.log; do `+
		`grep -h msg=rebooting "$f" 2>/dev/null && exit 0; done; sleep 1; done) & true`, time.Minute)
	return err
}

// agentRebooted waits for the agent's reboot line and the init's
// shutdown lines on the console, in any order (the agent's line is copied
// there from its log while the shutdown runs), and logs them.
func (g *guest) agentRebooted(fl flavour, shutdown ...*regexp.Regexp) error {
	ctx, cancel := context.WithTimeout(g.ctx, time.Minute)
	defer cancel()
	m, err := g.c.Saw(ctx, append([]*regexp.Regexp{agentRebooting(fl)}, shutdown...)...)
	for _, l := range m {
		g.t.Logf("console: %s", l)
	}
	return err
}

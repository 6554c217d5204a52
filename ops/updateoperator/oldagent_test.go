package updateoperator

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/updateoperator/platform/brapitest"
)

// oldAgentEnv names the old operator's Go agent (bottlerocket-update-
// operator v0.1.5) built from its public source:
//
//	git clone -b v0.1.5 https://github.com/bottlerocket-os/bottlerocket-update-operator
//	cd bottlerocket-update-operator && CGO_ENABLED=0 GOFLAGS=-mod=mod go build .
const oldAgentEnv = "SLIPWAY_UO_OLD_AGENT"

// A node still served by the old operator's Go agent, run as a real
// process against the Bottlerocket API emulator's socket (mounted at the
// /run/api.sock it dials, in a mount namespace of its own), rests at
// stabilize/ready with update-available: slipway's controller does not
// drive it, and says so: a held reason naming the old agent and what to
// do, an UpdateStuck Event, and the host untouched.
func TestOldAgentIsHeldWithAReason(t *testing.T) {
	bin := needOldAgent(t)
	e := testenv.Need(t, env)
	f := newFleetOn(t, e, "oldagent")
	f.usePrefix(BottlerocketPrefix) // the old agent's own prefix
	ctx := context.Background()
	name := "oldagent-0"
	node := testenv.FakeNode(name)
	node.Labels[BottlerocketPrefix+"/"+KeyInterfaceVersion] = InterfaceVersion // as the old operator's users labelled by hand
	// Where the old operator leaves a node with an update listed: at rest, ready, update-available.
	for k, v := range map[string]string{KeyActionWanted: "stabilize", KeyActionActive: "stabilize", KeyActionState: "ready", KeyUpdateAvailable: "true"} {
		node.Annotations[BottlerocketPrefix+"/"+k] = v
	}
	node.Labels[BottlerocketPrefix+"/"+KeyUpdateAvailable] = "true"
	if _, err := f.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	srv := startOldAgent(t, f, e.Kubeconfig, bin, name)
	stop := f.controller(func(o *ControllerOptions) { o.Policy.PauseBetween = 0 })
	defer stop()
	eventually(t, 2*time.Minute, "the old agent's node held with a reason and an Event", func() (bool, string) {
		n := f.node(name)
		r := n.Annotations[f.keys.Key(KeyReason)]
		return r == OldAgentReason && has(f.eventReasons(name), ReasonStuck),
			"annotations " + strings.Join(protocolAnnotations(n.Annotations, BottlerocketPrefix), ", ")
	})
	// The old agent ran all along (restarted as its pod would be): it
	// asked its host for updates through the emulator's socket.
	time.Sleep(3 * time.Second)
	if srv.Reboots() != 0 || srv.Staged() != "" {
		t.Errorf("the held node's host was touched: %d reboots, staged %q", srv.Reboots(), srv.Staged())
	}
}

func protocolAnnotations(a map[string]string, prefix string) []string {
	var out []string
	for k, v := range a {
		if strings.HasPrefix(k, prefix+"/") {
			out = append(out, strings.TrimPrefix(k, prefix+"/")+"="+v)
		}
	}
	return out
}

// A node whose old agent (the old operator's) was left at error is held,
// and the fleet moves on without it. The old agent takes no intent while
// at error (its own controller overwrote the agent's annotations to
// recover it): a stand-in does what it does then, which is to post only
// update-available (annotation and label) from its periodic check, and
// never a version. slipway's controller fails the update, wants
// reset-state, and past --state-timeout holds the node: a held reason
// naming the node and what to do, an UpdateStuck Event, no slot taken (the
// other node, with slipway's agent, updates at max-concurrent 1).
func TestOldAgentInErrorIsHeldWithAReason(t *testing.T) {
	f := newFleetOn(t, testenv.Need(t, env), "olderror")
	f.usePrefix(BottlerocketPrefix)
	ctx := context.Background()
	old, other := "olderror-old", "olderror-new"
	node := testenv.FakeNode(old)
	node.Labels[f.keys.InterfaceVersion()] = InterfaceVersion
	node.Labels[f.keys.UpdateAvailable()] = "true"
	// Where the old operator leaves a node whose prepare failed: its
	// controller wanted prepare-update, its agent took it and failed.
	for k, v := range map[string]string{KeyActionWanted: "prepare-update", KeyActionActive: "prepare-update", KeyActionState: "error", KeyUpdateAvailable: "true"} {
		node.Annotations[f.keys.Key(k)] = v
	}
	if _, err := f.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), old, metav1.DeleteOptions{}) })
	standIn, stopStandIn := context.WithCancel(ctx)
	standInDone := make(chan struct{})
	// Stopped, and its last patch returned, before the node is deleted: a
	// patch after the deletion would fail the test.
	t.Cleanup(func() { stopStandIn(); <-standInDone })
	go func() {
		defer close(standInDone)
		for standIn.Err() == nil {
			n, err := f.kube.CoreV1().Nodes().Get(standIn, old, metav1.GetOptions{})
			if err == nil && n.Annotations[f.keys.State()] == string(StateError) { // at error: only its update check posts
				f.patch(old, map[string]any{"metadata": map[string]any{
					"annotations": map[string]any{f.keys.UpdateAvailable(): "true"}, "labels": map[string]any{f.keys.UpdateAvailable(): "true"}}})
			}
			select {
			case <-standIn.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	f.addNode(other, true)
	stop := f.controller(func(o *ControllerOptions) {
		o.Policy.PauseBetween = 0
		o.Policy.Timeouts.Reset = 3 * time.Second
	})
	defer stop()
	eventually(t, 2*time.Minute, "the old agent's node held with a reason and an Event, the other node updated", func() (bool, string) {
		n := f.node(old)
		v := f.keys.View(n, "")
		r := n.Annotations[f.keys.Key(KeyReason)]
		ok := strings.HasPrefix(r, HeldPrefix) && strings.Contains(r, "node "+old) && strings.Contains(r, "delete the old agent DaemonSet") &&
			has(f.eventReasons(old), ReasonStuck) && v.Wanted == IntentReset
		return ok && f.version(other) == "v2" && f.keys.View(f.node(other), "").Wanted == IntentStabilize,
			"old: " + strings.Join(protocolAnnotations(n.Annotations, BottlerocketPrefix), ", ") + "; other at " + f.version(other)
	})
	// Held, not retried: it stays at reset-state, said once.
	time.Sleep(4 * time.Second)
	n := f.node(old)
	if v := f.keys.View(n, ""); v.Wanted != IntentReset || !strings.HasPrefix(v.Reason, HeldPrefix) {
		t.Errorf("the held node moved on: wanted %s, reason %q", v.Wanted, v.Reason)
	}
	stuck := 0
	for _, r := range f.eventReasons(old) {
		if r == ReasonStuck {
			stuck++
		}
	}
	if stuck != 1 {
		t.Errorf("%d UpdateStuck Events for the held node, want 1", stuck)
	}
}

// startOldAgent runs the old operator's agent bin for node as a real
// process against a Bottlerocket API emulator (v1, v2 listed) mounted at
// the /run/api.sock it dials, restarted when it exits as its DaemonSet's
// pod would be, and returns the emulator.
func startOldAgent(t *testing.T, f *fleet, kubeconfig, bin, name string) *brapitest.Server {
	t.Helper()
	sock := filepath.Join(f.dir, name+"-old.sock")
	srv, err := brapitest.New(sock, "v1", "v2", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	// Restarted when it exits, as its DaemonSet's pod would be (it exits
	// on a conflicting write of its Node).
	script := `mount -t tmpfs tmpfs /run && touch /run/api.sock && mount --bind "$SOCK" /run/api.sock && while :; do "$BIN" -agent -nodeName "$NODE"; sleep 1; done`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "SOCK="+sock, "BIN="+bin, "NODE="+name, "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = testWriter{t}, testWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	return srv
}

// needOldAgent is the old agent's binary, or a skip saying what is missing.
func needOldAgent(t *testing.T) string {
	bin := os.Getenv(oldAgentEnv)
	if bin == "" {
		t.Skipf("%s is not set (the old operator's agent, built from bottlerocket-update-operator v0.1.5)", oldAgentEnv)
	}
	if _, err := exec.LookPath("unshare"); err != nil || os.Geteuid() != 0 {
		t.Skip("the old agent dials /run/api.sock: mounting the emulator there needs unshare and root")
	}
	return bin
}

// The real old agent (v0.1.5) left at error: it ignores reset-state, as
// its source says, and the node is held with the reason naming it.
func TestRealOldAgentInErrorIsHeld(t *testing.T) {
	bin := needOldAgent(t)
	e := testenv.Need(t, env)
	f := newFleetOn(t, e, "realolderror")
	f.usePrefix(BottlerocketPrefix)
	ctx := context.Background()
	name := "realolderror-0"
	node := testenv.FakeNode(name)
	node.Labels[f.keys.InterfaceVersion()] = InterfaceVersion
	node.Labels[f.keys.UpdateAvailable()] = "true"
	for k, v := range map[string]string{KeyActionWanted: "prepare-update", KeyActionActive: "prepare-update", KeyActionState: "error", KeyUpdateAvailable: "true"} {
		node.Annotations[f.keys.Key(k)] = v
	}
	if _, err := f.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	srv := startOldAgent(t, f, e.Kubeconfig, bin, name)
	stop := f.controller(func(o *ControllerOptions) {
		o.Policy.PauseBetween = 0
		o.Policy.Timeouts.Reset = 5 * time.Second
	})
	defer stop()
	eventually(t, 2*time.Minute, "the old agent at error held with a reason naming the node, and an Event", func() (bool, string) {
		n := f.node(name)
		r := n.Annotations[f.keys.Key(KeyReason)]
		return strings.HasPrefix(r, HeldPrefix+"node "+name) && has(f.eventReasons(name), ReasonStuck) && n.Annotations[f.keys.Wanted()] == string(IntentReset),
			"annotations " + strings.Join(protocolAnnotations(n.Annotations, BottlerocketPrefix), ", ")
	})
	if a := f.node(name).Annotations[f.keys.Active()]; a != string(IntentPrepare) {
		t.Errorf("the old agent answered: action-active %s", a)
	}
	if srv.Reboots() != 0 {
		t.Errorf("the held node's host rebooted %d times", srv.Reboots())
	}
}

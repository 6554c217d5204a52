package monitor

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/drain"
	versioned "slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/swarm/appcheck"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/supervisor"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, testenv.Options{CRDs: crds.Must()}, &env))
}

const (
	agent        = "slipway-agent"
	controlPlane = "node-role.kubernetes.io/control-plane"
)

// world is one test's clients and monitor; the objects it makes are deleted
// when the test ends, so the next monitor starts on an empty cluster.
type world struct {
	t   *testing.T
	ctx context.Context
	c   kubernetes.Interface
	kc  *kube.Clientset
	oc  versioned.Interface
	m   *Monitor
}

func newWorld(t *testing.T, cfg Config) *world {
	t.Helper()
	e := testenv.Need(t, env)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &world{t: t, ctx: ctx}
	var err error
	if w.c, err = kubernetes.NewForConfig(e.Config); err != nil {
		t.Fatal(err)
	}
	if w.kc, err = kube.NewForConfig(e.Config); err != nil {
		t.Fatal(err)
	}
	if w.oc, err = versioned.NewForConfig(e.Config); err != nil {
		t.Fatal(err)
	}
	if w.m, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	if err := w.m.Run(ctx, e.Config); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, v := range w.m.Violations() {
				t.Log(v)
			}
		}
	})
	return w
}

// node makes a Ready node with boot ID boot-1.
func (w *world) node(name string, labels map[string]string) {
	w.t.Helper()
	w.nodeBoot(name, labels, "boot-1")
}

// nodeBoot registers a Ready node as a kubelet does: created, then its
// status (with boot) written.
func (w *world) nodeBoot(name string, labels map[string]string, boot string) {
	w.t.Helper()
	n, err := w.c.CoreV1().Nodes().Create(w.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = w.c.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	n.Status.NodeInfo.BootID = boot
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := w.c.CoreV1().Nodes().UpdateStatus(w.ctx, n, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

// status changes a node's boot ID ("" : unchanged) and readiness.
func (w *world) status(name, boot string, ready bool) {
	w.t.Helper()
	n, err := w.c.CoreV1().Nodes().Get(w.ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	if boot != "" {
		n.Status.NodeInfo.BootID = boot
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n.Status.Conditions[0].Status = st
	if _, err := w.c.CoreV1().Nodes().UpdateStatus(w.ctx, n, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) cordon(name string) {
	w.t.Helper()
	if err := drain.Cordon(w.ctx, w.kc, name, agent); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) uncordon(name string) {
	w.t.Helper()
	if _, err := drain.Uncordon(w.ctx, w.kc, name, agent); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) annotate(name, key, value string) {
	w.t.Helper()
	n, err := w.c.CoreV1().Nodes().Get(w.ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[key] = value
	if _, err := w.c.CoreV1().Nodes().Update(w.ctx, n, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) channel(name string, concurrency int, pool string) {
	w.t.Helper()
	c := &opsv1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: opsv1.UpdateChannelSpec{
		URL: "https://example.invalid/releases", Concurrency: concurrency,
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}}}}
	if _, err := w.oc.OpsV1().UpdateChannels("default").Create(w.ctx, c, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() {
		_ = w.oc.OpsV1().UpdateChannels("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// slots sets channel's status.updating to nodes (a slot each) and waits
// until the monitor has observed that version.
func (w *world) slots(channel string, nodes ...string) {
	w.t.Helper()
	c, err := w.oc.OpsV1().UpdateChannels("default").Get(w.ctx, channel, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	c.Status.Updating = nil
	for _, n := range nodes {
		c.Status.Updating = append(c.Status.Updating, opsv1.Slot{Node: n, Version: "v2"})
	}
	if c, err = w.oc.OpsV1().UpdateChannels("default").UpdateStatus(w.ctx, c, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	key := "UpdateChannel/default/" + channel
	deadline := time.Now().Add(10 * time.Second)
	for h := w.m.History(key); len(h) == 0 || h[len(h)-1].ResourceVersion != c.ResourceVersion; h = w.m.History(key) {
		if time.Now().After(deadline) {
			w.t.Fatalf("the monitor never observed channel %s at %s", channel, c.ResourceVersion)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// caughtUp waits until the monitor has observed the latest version of the
// node (so that "nothing reported" speaks of the state written).
func (w *world) caughtUp(name string) {
	w.t.Helper()
	n, err := w.c.CoreV1().Nodes().Get(w.ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		h := w.m.History("Node//" + name)
		if len(h) > 0 && h[len(h)-1].ResourceVersion == n.ResourceVersion {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.t.Fatalf("the monitor never observed node %s at %s", name, n.ResourceVersion)
}

// quiet fails the test on any violation recorded.
func (w *world) quiet(when string) {
	w.t.Helper()
	if vs := w.m.Violations(); len(vs) > 0 {
		w.t.Fatalf("%s: %d violations, want none: %v", when, len(vs), vs[0])
	}
}

// expect waits for a violation of inv and returns it.
func (w *world) expect(inv string) Violation {
	w.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, v := range w.m.Violations() {
			if v.Invariant == inv {
				return v
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.t.Fatalf("no %s violation reported; recorded: %v", inv, w.m.Violations())
	return Violation{}
}

func TestPlantedCordonBeyondConcurrency(t *testing.T) {
	w := newWorld(t, Config{})
	w.channel("cc", 1, "cc")
	for _, n := range []string{"cc-1", "cc-2", "cc-3"} {
		w.node(n, map[string]string{"pool": "cc"})
	}
	w.node("other", map[string]string{"pool": "elsewhere"})
	w.cordon("cc-1")
	w.cordon("other") // not the channel's
	w.caughtUp("cc-1")
	w.caughtUp("other")
	w.quiet("one cordon of concurrency 1")
	w.cordon("cc-2")
	v := w.expect(InvChannelConcurrency)
	if !strings.Contains(v.Message, "cc-1") || !strings.Contains(v.Message, "cc-2") || strings.Contains(v.Message, "other") {
		t.Errorf("message names the wrong nodes: %s", v.Message)
	}
	if h := v.History["Node//cc-2"]; len(h) < 2 || !strings.Contains(h[len(h)-1].Summary, `cordoned-by="slipway-agent"`) {
		t.Errorf("history of cc-2 does not show its cordon: %v", h)
	}
	if len(v.History["UpdateChannel/default/cc"]) == 0 {
		t.Errorf("no history of the channel: %v", v)
	}
	// Recorded once while it stands.
	w.annotate("cc-2", "touch", "1")
	w.caughtUp("cc-2")
	n := 0
	for _, v := range w.m.Violations() {
		if v.Invariant == InvChannelConcurrency {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d violations recorded for one standing violation, want 1", n)
	}
}

func TestPlantedControlPlaneTwoDown(t *testing.T) {
	w := newWorld(t, Config{})
	w.channel("cp", 3, "cp")
	for _, n := range []string{"cp-1", "cp-2", "cp-3"} {
		w.node(n, map[string]string{"pool": "cp", controlPlane: ""})
	}
	w.cordon("cp-1")
	w.caughtUp("cp-1")
	w.quiet("one control-plane node cordoned")
	w.status("cp-2", "", false) // NotReady, not cordoned: within concurrency 3, yet two servers down
	v := w.expect(InvControlPlane)
	if !strings.Contains(v.Message, "cp-2 (NotReady)") {
		t.Errorf("message: %s", v.Message)
	}
	for _, vv := range w.m.Violations() {
		if vv.Invariant == InvChannelConcurrency {
			t.Errorf("channel concurrency reported within its bound: %v", vv)
		}
	}
}

func TestPlantedRebootWithoutDrain(t *testing.T) {
	w := newWorld(t, Config{})
	w.node("rb-1", nil)
	w.node("rb-2", nil)
	// rb-1 is cordoned, then reboots: within the rules.
	w.cordon("rb-1")
	w.status("rb-1", "boot-2", false)
	w.status("rb-1", "", true)
	w.uncordon("rb-1")
	w.caughtUp("rb-1")
	w.quiet("a reboot after a cordon")
	// rb-2 reboots with no cordon.
	w.status("rb-2", "boot-2", true)
	v := w.expect(InvRebootWithoutDrain)
	if v.Key != "rb-2@boot-2" {
		t.Errorf("key %q, want rb-2@boot-2", v.Key)
	}
	if h := v.History["Node//rb-2"]; len(h) < 2 || !strings.Contains(h[len(h)-1].Summary, "boot=boot-2") || !strings.Contains(h[len(h)-2].Summary, "boot=boot-1") {
		t.Errorf("history does not show the boot change: %v", h)
	}
}

// A simulated node reports a boot ID from its creation (testenv.FakeNode,
// the helper every simulated cluster registers its nodes with), as a
// kubelet does: its first reboot, from that boot ID to a new one, is
// judged like any later one.
func TestPlantedFirstRebootWithoutDrain(t *testing.T) {
	w := newWorld(t, Config{})
	first := map[string]string{}
	for _, name := range []string{"fb-1", "fb-2"} {
		n, err := w.c.CoreV1().Nodes().Create(w.ctx, testenv.FakeNode(name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.c.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		if n.Status.NodeInfo.BootID == "" {
			t.Fatalf("fake node %s registered with no boot ID", name)
		}
		first[name] = n.Status.NodeInfo.BootID
		w.caughtUp(name)
	}
	reboot := func(name string) string { // as supervisor.Reboot reports the new boot
		t.Helper()
		boot := supervisor.NewBootID()
		patch := fmt.Sprintf(`{"status":{"nodeInfo":{"bootID":%q}}}`, boot)
		if _, err := w.c.CoreV1().Nodes().PatchStatus(w.ctx, name, []byte(patch)); err != nil {
			t.Fatal(err)
		}
		w.caughtUp(name)
		return boot
	}
	w.cordon("fb-1")
	reboot("fb-1")
	w.quiet("a first reboot after a cordon")
	boot := reboot("fb-2")
	v := w.expect(InvRebootWithoutDrain)
	if v.Key != "fb-2@"+boot {
		t.Errorf("key %q, want fb-2@%s", v.Key, boot)
	}
	if h := v.History["Node//fb-2"]; len(h) < 2 || !strings.Contains(h[len(h)-1].Summary, "boot="+boot) || !strings.Contains(h[len(h)-2].Summary, "boot="+first["fb-2"]) {
		t.Errorf("history does not show the change from the first boot: %v", h)
	}
}

// A node deleted and registered again with a new boot ID rebooted too: a
// drained one (cordoned before its deletion) within the rules, an undrained
// one not.
func TestPlantedRebootByReRegistration(t *testing.T) {
	w := newWorld(t, Config{})
	w.node("rr-1", nil)
	w.node("rr-2", nil)
	w.cordon("rr-1")
	reRegister := func(name, boot string) {
		t.Helper()
		w.caughtUp(name)
		if err := w.c.CoreV1().Nodes().Delete(w.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for h := w.m.History("Node//" + name); len(h) == 0 || h[len(h)-1].Summary != "deleted"; h = w.m.History("Node//" + name) {
			if time.Now().After(deadline) {
				t.Fatalf("the monitor never saw the deletion of %s: %v", name, h)
			}
			time.Sleep(20 * time.Millisecond)
		}
		w.nodeBoot(name, nil, boot)
		w.caughtUp(name)
	}
	reRegister("rr-1", "boot-2")
	w.quiet("a drained node registered again after its reboot")
	reRegister("rr-2", "boot-2")
	if v := w.expect(InvRebootWithoutDrain); v.Key != "rr-2@boot-2" {
		t.Errorf("key %q", v.Key)
	}
}

func TestPlantedOperatorBeyondMaxConcurrent(t *testing.T) {
	w := newWorld(t, Config{Limits: Limits{OperatorMaxConcurrent: 1}})
	wanted := "update.slipway.dev/action-wanted"
	for _, n := range []string{"uo-1", "uo-2"} {
		w.node(n, nil)
		w.annotate(n, wanted, "stabilize")
	}
	w.annotate("uo-1", wanted, "reboot-update")
	w.caughtUp("uo-1")
	w.quiet("one node in flight")
	w.annotate("uo-2", wanted, "perform-update")
	v := w.expect(InvOperatorInFlight)
	if !strings.Contains(v.Message, "uo-1, uo-2") {
		t.Errorf("message: %s", v.Message)
	}
}

func TestPlantedHotLoop(t *testing.T) {
	w := newWorld(t, Config{})
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "hot", Namespace: "default"}}
	l, err := w.c.CoordinationV1().Leases("default").Create(w.ctx, l, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.c.CoordinationV1().Leases("default").Delete(context.Background(), "hot", metav1.DeleteOptions{})
	})
	start := time.Now()
	for i := range 50 {
		h := fmt.Sprintf("holder-%d", i)
		l.Spec.HolderIdentity = &h
		if l, err = w.c.CoordinationV1().Leases("default").Update(w.ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Skipf("50 writes took %s on this machine: not a burst within a second", d)
	}
	v := w.expect(InvHotLoop)
	if v.Key != "Lease/default/hot" {
		t.Errorf("key %q", v.Key)
	}
}

func TestPlantedDoubleHolder(t *testing.T) {
	sample := appcheck.Sample{"w1": {"j1"}, "w2": {"j2"}}
	latest := make(chan appcheck.Sample, 1)
	latest <- sample
	w := newWorld(t, Config{Tick: 20 * time.Millisecond, Apps: func() appcheck.Sample {
		s := <-latest
		latest <- s
		return s
	}})
	time.Sleep(100 * time.Millisecond)
	w.quiet("each job in one hand")
	<-latest
	latest <- appcheck.Sample{"w1": {"j1"}, "w2": {"j1", "j2"}}
	v := w.expect(InvDoubleHeld)
	if !strings.Contains(v.Message, "w1 and w2") {
		t.Errorf("message: %s", v.Message)
	}
}

// TestQuietRun drives a rollout within every rule: the monitor must report
// nothing, though it checked all along.
func TestQuietRun(t *testing.T) {
	w := newWorld(t, Config{Limits: Limits{OperatorMaxConcurrent: 1}, Tick: 50 * time.Millisecond,
		Apps: func() appcheck.Sample { return appcheck.Sample{"w1": {"j1", "j2"}, "w2": {"j3"}} }})
	w.channel("quiet", 1, "quiet")
	names := []string{"q-1", "q-2", "q-3"}
	for _, n := range names {
		w.node(n, map[string]string{"pool": "quiet", controlPlane: ""})
	}
	wanted := "update.slipway.dev/action-wanted"
	l, err := w.c.CoordinationV1().Leases("default").Create(w.ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "calm", Namespace: "default"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.c.CoordinationV1().Leases("default").Delete(context.Background(), "calm", metav1.DeleteOptions{})
	})
	for i, n := range names {
		w.annotate(n, wanted, "reboot-update")
		w.slots("quiet", n)
		w.cordon(n)
		w.status(n, "boot-2", false)
		w.status(n, "", true)
		w.caughtUp(n)
		w.slots("quiet")
		w.uncordon(n)
		w.annotate(n, wanted, "stabilize")
		h := fmt.Sprintf("renew-%d", i)
		l.Spec.HolderIdentity = &h
		if l, err = w.c.CoordinationV1().Leases("default").Update(w.ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		w.caughtUp(n)
	}
	time.Sleep(300 * time.Millisecond) // ticks with the applications' reports
	w.quiet("a rollout within the rules")
	if c := w.m.Checks(); c < 30 {
		t.Errorf("only %d checks made", c)
	}
	if errs := w.m.Errors(); len(errs) > 0 {
		t.Errorf("checks not made: %v", errs)
	}
	t.Logf("%d checks, no violation", w.m.Checks())
}

// TestPlantedRebootWithoutSlot: a channel's node drained (slipway's
// cordon) reboots while the channel's status.updating lists it: within the
// rules; another drained the same way but with no slot held reboots:
// reported. A node no channel selects is not judged by this rule.
func TestPlantedRebootWithoutSlot(t *testing.T) {
	w := newWorld(t, Config{})
	w.channel("rs", 1, "rs")
	for _, n := range []string{"rs-1", "rs-2"} {
		w.node(n, map[string]string{"pool": "rs"})
	}
	w.node("rs-other", map[string]string{"pool": "elsewhere"})
	// rs-1: slot, drain, reboot, back, slot released.
	w.slots("rs", "rs-1")
	w.cordon("rs-1")
	w.status("rs-1", "boot-2", false)
	w.status("rs-1", "", true)
	w.caughtUp("rs-1")
	w.slots("rs")
	w.uncordon("rs-1")
	w.caughtUp("rs-1")
	// rs-other: no channel's node; its drain and reboot are not this rule's.
	w.cordon("rs-other")
	w.status("rs-other", "boot-2", true)
	w.caughtUp("rs-other")
	w.quiet("a reboot within its slot, and one of a node no channel selects")
	// rs-2: drained (cordon) but no slot held.
	w.cordon("rs-2")
	w.status("rs-2", "boot-2", true)
	v := w.expect(InvRebootWithoutSlot)
	if v.Key != "rs-2@boot-2" || !strings.Contains(v.Message, "channel default/rs") {
		t.Errorf("key %q message %q", v.Key, v.Message)
	}
	if h := v.History["UpdateChannel/default/rs"]; len(h) == 0 {
		t.Errorf("no history of the channel: %v", v.History)
	}
	for _, o := range w.m.Violations() {
		if o.Invariant == InvRebootWithoutDrain {
			t.Errorf("a drained node reported as undrained: %v", o)
		}
	}
}

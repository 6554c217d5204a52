package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/upgrade/releasetest"
)

// envChaosSeed, set to an integer, replays the chaos of a failed run.
const envChaosSeed = "SLIPWAY_CHAOS_SEED"

const (
	chaosVersion     = "v4"
	chaosMaxFailures = 3
	chaosDrain       = 6 * time.Second
)

// TestRolloutUnderChaos rolls v4 out at concurrency 2 while agents are
// SIGKILLed at random (and restarted, as the kubelet restarts a crashed
// container), a PodDisruptionBudget that sometimes forbids every eviction
// guards a Deployment, and a node is deleted and registered again. Samples
// every 0.5 s check that slots and slipway's cordons never exceed the
// concurrency; at the end no node is cordoned, every failure seen is still
// counted, each node shows the versions it runs, there is at most one
// Rebooting Event per reboot, and the rollout completed or stopped for the
// reason its failures give.
func TestRolloutUnderChaos(t *testing.T) {
	c := setup(t)
	if _, err := c.ops.OpsV1().UpdateChannels(ns).Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("this test continues TestRollout's cluster; run the package (go test ./ops/e2e), not this test alone: %v", err)
	}
	seed := chaosSeed(t)
	t.Logf("chaos seed %d", seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos seed %d: replay with %s=%d", seed, envChaosSeed, seed)
		}
	})
	if _, err := releasetest.Write(releasetest.Options{Mirror: mirror, Version: chaosVersion}); err != nil {
		t.Fatal(err)
	}
	guarded(t, c)
	boots, ran := bootsOf(), map[string]string{}
	for _, n := range env.Nodes {
		ran[n] = current(t, n)
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := sample(ctx, t, c)
	k := &chaos{c: c, rng: rand.New(rand.NewPCG(uint64(seed), 0))}
	patchChannel(t, c, fmt.Sprintf(`{"spec":{"version":%q,"concurrency":%d,"maxFailures":%d,"drain":{"timeout":%q}}}`,
		chaosVersion, concurrency, chaosMaxFailures, chaosDrain))
	chaosDone := make(chan struct{})
	go func() { defer close(chaosDone); k.run(ctx, t) }()
	t.Cleanup(func() {
		if t.Failed() {
			logState(t, c)
		}
	})
	waitUntil(t, 6*time.Minute, "the rollout to finish or stop", func() (bool, error) { return k.reregistered() && settled(t, c), nil })
	cancel()
	<-chaosDone
	waitUntil(t, time.Minute, "the rollout settled after the chaos", func() (bool, error) { return settled(t, c), nil })
	t.Logf("%s in %s: %d agents killed, PDB flipped %d times, %s deleted and registered again; %d reboots",
		chaosVersion, time.Since(start).Round(time.Second), k.kills, k.flips, k.gone, rebootsSince(boots))
	s.check(t)
	checkOutcome(t, c, s, start, boots, ran)
	checkRebootingEvents(t, c, start, rebootsSince(boots))
	if k.kills < 5 {
		t.Errorf("only %d agents killed: the chaos did not happen", k.kills)
	}
}

func chaosSeed(t *testing.T) int64 {
	if v := os.Getenv(envChaosSeed); v != "" {
		seed, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an integer", envChaosSeed, v)
		}
		return seed
	}
	return time.Now().UnixNano()
}

// guarded creates a 2-replica Deployment whose PodDisruptionBudget starts
// at minAvailable 2 (no eviction allowed); the chaos flips it.
func guarded(t *testing.T, c clients) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": "guarded"}
	r := int32(2)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &r, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "guarded", Image: "guarded:1"}}}}}}
	if _, err := c.kube.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	two := intstr.FromInt32(2)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &two, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := c.kube.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.kube.PolicyV1().PodDisruptionBudgets("default").Delete(context.Background(), "guarded", metav1.DeleteOptions{})
		_ = c.kube.AppsV1().Deployments("default").Delete(context.Background(), "guarded", metav1.DeleteOptions{})
	})
	waitUntil(t, 2*time.Minute, "the guarded Deployment available", func() (bool, error) {
		d, err := c.kube.AppsV1().Deployments("default").Get(ctx, "guarded", metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == r, err
	})
}

// chaos acts at random (from its seeded source) until ctx ends.
type chaos struct {
	c            clients
	rng          *rand.Rand
	mu           sync.Mutex
	kills, flips int
	gone         string // the node deleted and registered again
	back         bool
}

func (k *chaos) reregistered() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.back
}

func (k *chaos) run(ctx context.Context, t *testing.T) {
	begun := time.Now()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(300+k.rng.IntN(1200)) * time.Millisecond):
		}
		// Kills are frequent; the PDB stays as it is for 6 s on average,
		// as long as the drain timeout, so some drains fail and some pass.
		switch r := k.rng.IntN(20); {
		case !k.reregistered() && time.Since(begun) > 5*time.Second:
			k.reregister(ctx, t)
		case r < 3:
			k.flipPDB(ctx, t, 1+k.rng.IntN(2))
		case r < 14:
			node := env.Nodes[k.rng.IntN(len(env.Nodes))]
			if ok, err := env.Crash(node); err != nil {
				t.Errorf("kill the agent of %s: %v", node, err)
			} else if ok {
				k.mu.Lock()
				k.kills++
				k.mu.Unlock()
			}
		}
	}
}

// flipPDB sets the guarded PodDisruptionBudget's minAvailable: 2 forbids
// every eviction, 1 allows one at a time.
func (k *chaos) flipPDB(ctx context.Context, t *testing.T, minAvailable int) {
	patch := fmt.Sprintf(`{"spec":{"minAvailable":%d}}`, minAvailable)
	_, err := k.c.kube.PolicyV1().PodDisruptionBudgets("default").Patch(ctx, "guarded", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil && ctx.Err() == nil {
		t.Errorf("flip the PDB: %v", err)
	}
	k.mu.Lock()
	k.flips++
	k.mu.Unlock()
}

// reregister deletes a node that holds no slot and has no failure (kubectl
// delete node), then registers it again (its kubelet comes back); its agent
// keeps running throughout.
func (k *chaos) reregister(ctx context.Context, t *testing.T) {
	ch, err := k.c.ops.OpsV1().UpdateChannels(ns).Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		return
	}
	var free []string
	for _, n := range env.Nodes {
		if plan.FindSlot(ch.Status, n) < 0 && plan.FindFailure(ch.Status, n) < 0 {
			free = append(free, n)
		}
	}
	if len(free) == 0 {
		return
	}
	node := free[k.rng.IntN(len(free))]
	again := testenv.FakeNode(node)
	if old, err := k.c.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
		again.Status.NodeInfo.BootID = old.Status.NodeInfo.BootID // registered again, not rebooted
	}
	if err := k.c.kube.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete node %s: %v", node, err)
		return
	}
	for {
		_, err := k.c.kube.CoreV1().Nodes().Create(ctx, again.DeepCopy(), metav1.CreateOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsAlreadyExists(err) || ctx.Err() != nil {
			t.Errorf("register node %s again: %v", node, err)
			return
		}
		time.Sleep(100 * time.Millisecond) // still being deleted
	}
	k.mu.Lock()
	k.gone, k.back = node, true
	k.mu.Unlock()
}

// settled: no slot is held, every node counts, and each is at the target or
// failed at it, or the channel is Degraded (no new node starts).
func settled(t *testing.T, c clients) bool {
	ch := channel(t, c)
	if ch.Status.ObservedGeneration != ch.Generation || len(ch.Status.Updating) > 0 || ch.Status.Counts.Nodes != nodes {
		return false
	}
	if isCondition(ch, v1.ConditionDegraded) {
		return true
	}
	return ch.Status.Counts.UpToDate+failuresAt(ch) == nodes
}

// logState logs the channel's status and the nodes' slipway annotations,
// to tell why a rollout did not settle.
func logState(t *testing.T, c clients) {
	ctx := context.Background()
	if ch, err := c.ops.OpsV1().UpdateChannels(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
		b, _ := json.MarshalIndent(ch.Status, "", "  ")
		t.Logf("channel generation %d, status:\n%s", ch.Generation, b)
	}
	nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, n := range nodes.Items {
		ann := map[string]string{}
		for k, v := range n.Annotations {
			if strings.Contains(k, "slipway.dev/") {
				ann[k] = v
			}
		}
		t.Logf("node %s unschedulable=%v labels=%v annotations=%v", n.Name, n.Spec.Unschedulable, n.Labels, ann)
	}
}

func isCondition(ch *v1.UpdateChannel, typ string) bool {
	for _, c := range ch.Status.Conditions {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue && c.ObservedGeneration == ch.Generation
		}
	}
	return false
}

func failuresAt(ch *v1.UpdateChannel) int {
	n := 0
	for _, f := range ch.Status.Failed {
		if f.Version == chaosVersion {
			n++
		}
	}
	return n
}

// bootsOf is how often each node has booted so far.
func bootsOf() map[string]int {
	m := map[string]int{}
	for _, node := range env.Nodes {
		m[node] = env.Supervisor.Boots(node)
	}
	return m
}

func rebootsSince(before map[string]int) int {
	n := 0
	for node, b := range bootsOf() {
		n += b - before[node]
	}
	return n
}

// checkOutcome: no node cordoned, each node labelled with what it runs,
// and the channel complete, or stopped for the failures it counts.
func checkOutcome(t *testing.T, c clients, s *sampler, since time.Time, boots map[string]int, ran map[string]string) {
	ctx := context.Background()
	ch := channel(t, c)
	failed := map[string]bool{}
	for _, f := range ch.Status.Failed {
		if f.Version == chaosVersion {
			failed[f.Node] = true
			t.Logf("failed: %s (attempt %d): %s", f.Node, f.Attempts, f.Reason)
		}
	}
	s.checkFailuresKept(t, ch)
	checkFailedEvents(t, c, since, failed)
	if ch.Status.Counts.Failed != len(failed) {
		t.Errorf("counts.failed = %d, status.failed holds %d at %s", ch.Status.Counts.Failed, len(failed), chaosVersion)
	}
	for _, name := range env.Nodes {
		n, err := c.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Spec.Unschedulable || drain.CordonedBy(n.Annotations) != "" {
			t.Errorf("node %s left cordoned", name)
		}
		// A node runs what it booted: what it ran before the chaos until it
		// reboots (a failed drain may leave the next version staged), then
		// its system directory's current version.
		runs := ran[name]
		if env.Supervisor.Boots(name) != boots[name] {
			runs = current(t, name)
		}
		if got := n.Labels[protocol.LabelRootfsVersion]; got != runs {
			t.Errorf("node %s runs %s but is labelled %q; its agent's log ends:\n%s", name, runs, got, logTail(name, 30))
		}
		if !failed[name] && runs != chaosVersion && !isCondition(ch, v1.ConditionDegraded) {
			t.Errorf("node %s runs %s, has no failure and the channel is not Degraded", name, runs)
		}
	}
	switch {
	case len(failed) == 0 && !isCondition(ch, v1.ConditionComplete):
		t.Errorf("no failure, yet not Complete: %+v", ch.Status.Conditions)
	case len(failed) >= chaosMaxFailures && !isCondition(ch, v1.ConditionDegraded):
		t.Errorf("%d failures (maxFailures %d), yet not Degraded: %+v", len(failed), chaosMaxFailures, ch.Status.Conditions)
	case len(failed) > 0 && len(failed) < chaosMaxFailures && (isCondition(ch, v1.ConditionDegraded) || isCondition(ch, v1.ConditionComplete)):
		t.Errorf("%d failures under maxFailures %d: want neither Degraded nor Complete: %+v", len(failed), chaosMaxFailures, ch.Status.Conditions)
	}
}

// checkRebootingEvents: at most one Rebooting Event per reboot, whatever
// the agent restarts in between.
func checkRebootingEvents(t *testing.T, c clients, since time.Time, reboots int) {
	time.Sleep(time.Second) // Events are posted asynchronously
	l, err := c.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=Rebooting"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range l.Items {
		if e.LastTimestamp.After(since) {
			n += int(max(e.Count, 1))
		}
	}
	t.Logf("%d Rebooting Events for %d reboots", n, reboots)
	if n > reboots {
		t.Errorf("%d Rebooting Events for %d reboots: one per reboot, not per agent restart", n, reboots)
	}
}

// logTail is the end of node's agent log (its command's output).
func logTail(node string, lines int) string {
	b, err := os.ReadFile(filepath.Join(env.NodeDir(node), "agent.log"))
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// checkFailedEvents: every node an UpgradeFailed Event named since the
// chaos began is still counted in status.failed (a failure recorded and
// pruned between two samples shows here).
func checkFailedEvents(t *testing.T, c clients, since time.Time, failed map[string]bool) {
	l, err := c.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=UpgradeFailed"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Items {
		f := strings.Fields(e.Message) // "node <name> (attempt <n>): <reason>"
		if e.LastTimestamp.After(since) && len(f) > 1 && f[0] == "node" && !failed[f[1]] {
			t.Errorf("%s failed (Event: %s) but status.failed does not count it any more", f[1], e.Message)
		}
	}
}

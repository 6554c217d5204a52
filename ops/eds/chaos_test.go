package eds

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/testenv"
)

// envEDSChaosSeed, set to an integer, replays the chaos of a failed run.
const envEDSChaosSeed = "SLIPWAY_EDS_CHAOS_SEED"

const (
	chaosNodes          = 10
	chaosMaxUnavailable = 2
	chaosFor            = 40 * time.Second
)

// TestRolloutUnderChaos rolls three template changes (each through a
// one-node canary, then at maxUnavailable 2, the later ones at random
// instants, often mid-rollout) over six nodes of its own while two
// leader-elected controller replicas are stopped or killed and restarted
// at random, pods are deleted, failed or made not-ready for a while, and a
// node is added. Samples every 0.5 s check that never more than
// maxUnavailable nodes are without an available pod beyond those the test
// disrupted itself, and that no node runs two live pods longer than
// dupGrace; at the end every node runs exactly one Ready pod of the last
// template, the status says Running with everything up to date, and the
// only ERS left is the active one.
func TestRolloutUnderChaos(t *testing.T) {
	t.Parallel()
	seed := edsChaosSeed(t)
	t.Logf("chaos seed %d", seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos seed %d: replay with %s=%d go test ./ops/eds -run TestRolloutUnderChaos", seed, envEDSChaosSeed, seed)
		}
	})
	sched := rand.New(rand.NewPCG(uint64(seed), 1))
	h := newBareHarness(t)
	logs := &quietAfterTest{t: t}
	t.Cleanup(func() { logs.closed.Store(true) })
	var nodes []string
	for i := range chaosNodes {
		nodes = append(nodes, h.addNode(fmt.Sprintf("c%d", i)))
	}
	late := h.ns + "-late"
	t.Cleanup(func() { _ = h.kube.CoreV1().Nodes().Delete(context.Background(), late, metav1.DeleteOptions{}) })
	rs := h.replicas(logs, "replica-a", "replica-b")
	e := withCanary(h.tolerate(daemon("agent", "agent:v1")), 3*time.Second)
	e.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"eds-test": h.ns}}
	mu := intstr.FromInt32(chaosMaxUnavailable)
	e.Spec.Strategy.RollingUpdate.MaxUnavailable = &mu
	h.create(e)
	h.rolledOut("agent", "agent:v1", chaosNodes)

	marks := newDisruptions()
	s, stopSampling := h.sample("agent", "eds-test="+h.ns, chaosMaxUnavailable, marks)
	defer stopSampling()
	k := &edsChaos{h: h, rng: rand.New(rand.NewPCG(uint64(seed), 2)), replicas: rs, marks: marks, late: late, leaders: s.leaders, noteHolder: s.noteHolder,
		lateAt: time.Duration(8+sched.IntN(20)) * time.Second, counts: map[string]int{}}
	// Template changes at 0 s and two random instants, the last 10 s before the chaos ends.
	at := []time.Duration{0, time.Duration(6+sched.IntN(10)) * time.Second, time.Duration(17+sched.IntN(13)) * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	chaosDone := make(chan struct{})
	start := time.Now()
	go func() { defer close(chaosDone); k.run(ctx, t) }()
	images := []string{"agent:v2", "agent:v3", "agent:v4"}
	for i, img := range images {
		time.Sleep(time.Until(start.Add(at[i])))
		h.setImage("agent", img)
		t.Logf("%v: template %s applied", time.Since(start).Round(100*time.Millisecond), img)
	}
	time.Sleep(time.Until(start.Add(chaosFor)))
	cancel()
	<-chaosDone
	k.settle(t)
	final := append(append([]string{}, nodes...), late)
	h.eventually(90*time.Second, "the last template on every node after the chaos", func() (bool, string) {
		return h.rolledOutExactly("agent", images[len(images)-1], final)
	})
	t.Logf("settled %v after the chaos began; chaos: %v", time.Since(start).Round(100*time.Millisecond), k.summary())
	stopSampling()
	s.check(t)
	k.check(t, s)
}

func edsChaosSeed(t *testing.T) int64 {
	if v := os.Getenv(envEDSChaosSeed); v != "" {
		seed, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an integer", envEDSChaosSeed, v)
		}
		return seed
	}
	return time.Now().UnixNano()
}

// edsChaos acts at random (from its seeded source, in its own goroutine)
// until its context ends.
type edsChaos struct {
	h          *harness
	rng        *rand.Rand
	replicas   []*replica
	marks      *disruptions
	late       string        // the node added mid-rollout
	lateAt     time.Duration // when
	added      bool
	handover   bool            // a leader was stopped with time for the other to take over, and the other seen holding the Lease
	leaders    func() []string // the Lease holders the sampler has seen, in turn
	noteHolder func(string)    // records a holder seen outside the sampler's polls
	restores   sync.WaitGroup

	mu     sync.Mutex
	counts map[string]int
}

func (k *edsChaos) run(ctx context.Context, t *testing.T) {
	begun := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(300+k.rng.IntN(900)) * time.Millisecond):
		}
		k.restartDue(t)
		switch r := k.rng.IntN(20); {
		case !k.added && time.Since(begun) > k.lateAt:
			k.addNode(ctx, t)
		case !k.handover && time.Since(begun) > 4*time.Second && k.allRunning():
			// Down long enough for the other replica to take the Lease under
			// load: back within 4 s, the stopped leader sometimes took its own
			// Lease again first, leaving the handover unproven.
			if k.stopController(ctx, t, false, 12*time.Second, true) {
				k.awaitHandover(ctx)
				// Not seen (the other replica slow to start under load, the
				// stopped one back first): the leader is stopped again once
				// both run, rather than leave the handover unproven.
				k.handover = distinct(k.leaders()) >= 2
			}
		case r < 4:
			kill := k.rng.IntN(2) == 0
			delay := time.Duration(300+k.rng.IntN(1700)) * time.Millisecond
			if !kill {
				delay += time.Duration(k.rng.IntN(3000)) * time.Millisecond
			}
			k.stopController(ctx, t, kill, delay, k.rng.IntN(4) > 0)
		case r < 10:
			k.unready(ctx, t, time.Duration(500+k.rng.IntN(2500))*time.Millisecond)
		case r < 13:
			k.disruptPod(ctx, t, "delete")
		case r < 14 && k.count("fail", 0) < 3:
			k.disruptPod(ctx, t, "fail")
		}
	}
}

// awaitHandover holds the chaos (up to 15 s) until the sampler has seen a
// second replica hold the Lease: a stop of the new leader at once, before
// a poll saw it, would leave the handover unproven.
func (k *edsChaos) awaitHandover(ctx context.Context) {
	deadline := time.Now().Add(15 * time.Second)
	for distinct(k.leaders()) < 2 && time.Now().Before(deadline) && ctx.Err() == nil {
		if holder, _, err := k.h.leaseHolder(ctx); err == nil && holder != "" {
			k.noteHolder(holder) // the Lease read directly: a slow poll may miss a short tenure
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (k *edsChaos) count(what string, add int) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.counts[what] += add
	return k.counts[what]
}

func (k *edsChaos) allRunning() bool {
	for _, r := range k.replicas {
		if !r.isRunning() {
			return false
		}
	}
	return true
}

// restartDue starts the replicas whose restart time has come.
func (k *edsChaos) restartDue(t *testing.T) {
	for _, r := range k.replicas {
		if started, err := r.restartIfDue(time.Now()); err != nil {
			t.Errorf("restart %s: %v", r.identity, err)
		} else if started {
			k.count("restart", 1)
		}
	}
}

// stopController stops (or kills) the leader, or when !leader a random
// running replica, and has it come back after delay. It reports whether
// it stopped the leader.
func (k *edsChaos) stopController(ctx context.Context, t *testing.T, kill bool, delay time.Duration, leader bool) bool {
	holder, _, _ := k.h.leaseHolder(ctx)
	var target *replica
	var running []*replica
	for _, r := range k.replicas {
		if r.isRunning() {
			running = append(running, r)
			if r.identity == holder {
				target = r
			}
		}
	}
	if len(running) == 0 {
		return false
	}
	if !leader || target == nil {
		target = running[k.rng.IntN(len(running))]
	}
	if err := target.down(kill, delay); err != nil {
		t.Errorf("stop %s: %v", target.identity, err)
	}
	k.count(map[bool]string{true: "kill", false: "stop"}[kill], 1)
	return target.identity == holder
}

// livePods are the EDS's pods not being deleted, by node name; with
// available, only those Running and Ready.
func (k *edsChaos) livePods(ctx context.Context, available bool) []corev1.Pod {
	list, err := k.h.kube.CoreV1().Pods(k.h.ns).List(ctx, metav1.ListOptions{LabelSelector: v1.LabelName + "=agent"})
	if err != nil {
		return nil
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" && (!available || (p.Status.Phase == corev1.PodRunning && podReady(&p))) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.NodeName < out[j].Spec.NodeName })
	return out
}

// unready flips an available pod's Ready condition off (a failing
// readiness probe) and back on after d, unless the pod is gone by then.
func (k *edsChaos) unready(ctx context.Context, t *testing.T, d time.Duration) {
	pods := k.livePods(ctx, true)
	if len(pods) == 0 {
		return
	}
	p := pods[k.rng.IntN(len(pods))]
	k.marks.begin(p.Spec.NodeName, "not-ready "+p.Name)
	err := k.setReady(ctx, p.Name, false)
	k.marks.end(p.Spec.NodeName)
	if err != nil {
		t.Errorf("make %s not ready: %v", p.Name, err)
		return
	}
	k.count("unready", 1)
	k.restores.Add(1)
	go func() {
		defer k.restores.Done()
		time.Sleep(d)
		if err := k.setReady(context.Background(), p.Name, true); err != nil {
			t.Errorf("make %s ready again: %v", p.Name, err)
		}
	}()
}

// setReady patches a pod's Ready and ContainersReady conditions, as a
// kubelet does when a readiness probe changes; a pod gone is no error.
func (k *edsChaos) setReady(ctx context.Context, pod string, ready bool) error {
	st := map[bool]string{true: "True", false: "False"}[ready]
	now := time.Now().UTC().Format(time.RFC3339)
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":%q,"lastTransitionTime":%q},{"type":"ContainersReady","status":%q,"lastTransitionTime":%q}]}}`, st, now, st, now)
	_, err := k.h.kube.CoreV1().Pods(k.h.ns).Patch(ctx, pod, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// disruptPod deletes a live pod (kubectl delete pod, an eviction) or marks
// it Failed (as a kubelet does with a pod it rejects).
func (k *edsChaos) disruptPod(ctx context.Context, t *testing.T, how string) {
	pods := k.livePods(ctx, false)
	if len(pods) == 0 {
		return
	}
	p := pods[k.rng.IntN(len(pods))]
	k.marks.begin(p.Spec.NodeName, how+" "+p.Name)
	var err error
	if how == "delete" {
		err = k.h.kube.CoreV1().Pods(k.h.ns).Delete(ctx, p.Name, metav1.DeleteOptions{})
	} else {
		_, err = k.h.kube.CoreV1().Pods(k.h.ns).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(`{"status":{"phase":"Failed"}}`), metav1.PatchOptions{}, "status")
	}
	k.marks.end(p.Spec.NodeName)
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		t.Errorf("%s pod %s: %v", how, p.Name, err)
		return
	}
	k.count(how, 1)
}

// addNode registers a new node the EDS selects; it has no pod until the
// controller creates one, which the sample does not count against it.
func (k *edsChaos) addNode(ctx context.Context, t *testing.T) {
	k.added = true
	n := testenv.FakeNode(k.late)
	n.Labels["eds-test"] = k.h.ns
	n.Spec.Taints = []corev1.Taint{{Key: "eds-test", Value: k.h.ns, Effect: corev1.TaintEffectNoSchedule}}
	k.marks.begin(k.late, "node added")
	_, err := k.h.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	k.marks.end(k.late)
	if err != nil {
		t.Errorf("add node %s: %v", k.late, err)
		return
	}
	k.count("node added", 1)
}

// settle ends the chaos's lasting effects: pods made not-ready are ready
// again and every replica runs.
func (k *edsChaos) settle(t *testing.T) {
	k.restores.Wait()
	for _, r := range k.replicas {
		if err := r.start(); err != nil {
			t.Errorf("start %s after the chaos: %v", r.identity, err)
		}
	}
}

func (k *edsChaos) summary() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]int{}
	for w, n := range k.counts {
		out[w] = n
	}
	return out
}

// check fails t when the chaos did not happen as intended.
func (k *edsChaos) check(t *testing.T, s *sampler) {
	c := k.summary()
	if c["kill"]+c["stop"] < 3 || c["unready"] < 3 || c["delete"] < 1 || c["node added"] != 1 {
		t.Errorf("too little chaos to judge the controller by: %v", c)
	}
	if l := s.leaders(); distinct(l) < 2 {
		t.Errorf("the Lease was held by %v only: no handover between the replicas", l)
	}
}

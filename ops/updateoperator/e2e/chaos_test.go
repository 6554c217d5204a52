package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/testenv"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// The chaos test's cluster and rollout.
const (
	chaosNodes      = 8
	chaosHostTime   = time.Second             // prepare
	chaosDownTime   = 1500 * time.Millisecond // a reboot's downtime
	chaosConcurrent = 2
	chaosReplicas   = 8 // of the PDB-guarded Deployment
	chaosMinReady   = 7 // its PDB's minAvailable
	envKillSeed     = "SLIPWAY_UO_KILL_SEED"
	// chaosStrikes is how many times the killer strikes at most (one every
	// 0.2-1.2 s: about half a minute, a whole rollout on an idle machine).
	// The chaos ends then, as a real one does, and the rollout must end
	// after it: under unending chaos how far a rollout gets depends on how
	// fast the machine is against the strikes' pace, not on the operator.
	chaosStrikes = 40
	// chaosWithin bounds the rollout, chaos included (25-35 s idle): a
	// deadline for a stuck rollout, not a timing claim. The PDB lets one
	// pod of the Deployment be away at a time, so with two nodes draining
	// an eviction waits for the last one's replacement to turn Ready; a
	// drain still blocked at its 30 s timeout (counted from its recorded
	// start, whichever replica resumes it) fails its attempt, and the
	// node is tried again after its reset. Under a loaded run (the test
	// packages side by side) one node did that twice and was still at its
	// third attempt after 2 minutes.
	chaosWithin = 4 * time.Minute
)

// A rollout through eight nodes (--prepare-ahead on, so the nodes that
// prepare ahead of their turn are struck too) while a seeded random source kills the
// real processes with SIGKILL: the two controller replicas (`slipway
// update-operator controller`, a Lease of 2 s between them; a killed one is
// started again after 0-1.5 s) and one to three agents at a time (the
// supervisor kills the agent's process group and starts it again at once),
// and stops a controller replica with SIGSTOP for 2.5-4 s, longer than its
// Lease, then lets it run on, as a leader starved of CPU would; it strikes
// chaosStrikes times, or until the rollout ends.
// Every 250 ms the fleet is sampled: never more than max-concurrent nodes
// cordoned by the operator, rebooting or down; the PDB-guarded Deployment
// never below its minAvailable. At the end every node runs v2, rests up to
// date and is not cordoned, and stays so 2 s after both replicas run again.
func TestSIGKILLChaos(t *testing.T) {
	e := testenv.Need(t, env)
	if mode != modeChaos {
		t.Skip("runs in a plain go test (not with the benchmark or the demo)")
	}
	seed := killSeed(t)
	t.Logf("kill seed %d", seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay: %s=%d go test -count=1 -run TestSIGKILLChaos ./ops/updateoperator/e2e", envKillSeed, seed)
			dumpLogs(t)
		}
	})
	c, err := kube.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	guarded(t, c, "default", "kill-web")
	replicas := []*proc{{name: "replica-a"}, {name: "replica-b"}}
	for _, r := range replicas {
		r.start(t, e)
	}
	defer func() {
		for _, r := range replicas {
			r.kill()
		}
	}()
	waitAll(t, c, time.Minute, "every agent up to date at v1", func(n *corev1.Node) bool {
		return n.Annotations[keys.State()] == string(uo.StateUpToDate)
	})
	if err := setRelease("v2"); err != nil {
		t.Fatal(err)
	}
	s := &fleetSampler{c: c}
	t.Cleanup(func() {
		if t.Failed() {
			s.logSteps(t)
		}
	})
	stopSampling := s.every(250 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	k := &killer{t: t, e: e, rng: rand.New(rand.NewPCG(uint64(seed), 0)), replicas: replicas}
	killed := make(chan struct{})
	go func() { defer close(killed); k.run(ctx) }()
	start := time.Now()
	waitAll(t, c, chaosWithin, "every node at v2", atV2)
	cancel()
	<-killed
	t.Logf("rolled in %s under %s", time.Since(start).Round(100*time.Millisecond), k.summary())
	for _, r := range replicas {
		r.start(t, e) // both up: they must leave the finished fleet alone
	}
	time.Sleep(2 * time.Second)
	waitAll(t, c, time.Second, "every node still at v2 with both replicas up", atV2)
	stopSampling()
	s.check(t)
	if k.agentKills == 0 || k.controllerKills == 0 || k.controllerFreezes == 0 {
		t.Errorf("the chaos never struck (%s)", k.summary())
	}
}

func atV2(n *corev1.Node) bool {
	return n.Annotations[keys.Key(uo.KeyCurrentVersion)] == "v2" && n.Annotations[keys.Wanted()] == string(uo.IntentStabilize) &&
		n.Annotations[keys.State()] == string(uo.StateUpToDate) && !n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == ""
}

func killSeed(t *testing.T) int64 {
	if v := os.Getenv(envKillSeed); v != "" {
		seed, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an integer seed", envKillSeed, v)
		}
		return seed
	}
	return time.Now().UnixNano()
}

// proc is one controller replica's process.
type proc struct {
	name string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) start(t *testing.T, e *testenv.Env) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return
	}
	cmd := exec.Command(filepath.Join(bin, "slipway"), "update-operator", "controller", "--kubeconfig", e.Kubeconfig,
		"--namespace", "default", "--lease", "kill-update-operator", "--lease-duration", "2s", "--metrics-addr", "", "--health-addr", "",
		"--os-image-pattern", "-", "--pause-between", "0s", "--max-concurrent", strconv.Itoa(chaosConcurrent),
		"--prepare-ahead", "--state-timeout", "30s", "--drain-timeout", "30s", "--failure-backoff", "1s", "--failure-backoff-max", "4s")
	logf, err := os.OpenFile(filepath.Join(e.Dir, "controller-"+p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	p.cmd, p.done = cmd, done
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// freeze stops the replica's process (SIGSTOP) for d, then lets it go on
// (SIGCONT); false when it was not running.
func (p *proc) freeze(ctx context.Context, d time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock() // a kill waits: the process is not left stopped
	if p.cmd == nil || p.cmd.Process.Signal(syscall.SIGSTOP) != nil {
		return false
	}
	sleep(ctx, d)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	return true
}

// killer strikes at instants drawn from its seeded source: a controller
// replica and agents in turn.
type killer struct {
	t                                              *testing.T
	e                                              *testenv.Env
	rng                                            *rand.Rand
	replicas                                       []*proc
	mu                                             sync.Mutex
	agentKills, controllerKills, controllerFreezes int
	spent                                          time.Duration // from the first strike's wait to the last strike, once the budget is spent
}

// freezeFor is the least a frozen controller replica stays stopped: longer
// than its Lease (--lease-duration 2s), so the other replica takes over.
const freezeFor = 2500 * time.Millisecond

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (k *killer) run(ctx context.Context) {
	began := time.Now()
	defer func() {
		if ctx.Err() == nil {
			k.mu.Lock()
			k.spent = time.Since(began)
			k.mu.Unlock()
		}
	}()
	for strike := 0; strike < chaosStrikes; strike++ {
		wait := time.Duration(200+k.rng.IntN(1000)) * time.Millisecond
		down := time.Duration(k.rng.IntN(1500)) * time.Millisecond
		victims := k.rng.Perm(len(k.e.Nodes))[:1+k.rng.IntN(3)]
		replica := k.replicas[k.rng.IntN(len(k.replicas))]
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		switch strike % 4 {
		case 0:
			replica.kill()
			k.count(&k.controllerKills, 1)
			sleep(ctx, down)
			replica.start(k.t, k.e)
			continue
		case 2:
			// Stalled, not dead: past its Lease, then it runs on from
			// wherever it stopped, as a leader starved of CPU would.
			if replica.freeze(ctx, freezeFor+down) {
				k.count(&k.controllerFreezes, 1)
			}
			continue
		}
		for _, i := range victims {
			if ok, err := k.e.Crash(k.e.Nodes[i]); err != nil {
				k.t.Errorf("kill the agent of %s: %v", k.e.Nodes[i], err)
			} else if ok {
				k.count(&k.agentKills, 1)
			}
		}
	}
}

func (k *killer) count(n *int, by int) {
	k.mu.Lock()
	*n += by
	k.mu.Unlock()
}

func (k *killer) summary() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	ended := "struck until the rollout ended"
	if k.spent > 0 {
		ended = fmt.Sprintf("all %d strikes spent in %s", chaosStrikes, k.spent.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("%d controller SIGKILLs, %d controller SIGSTOPs, %d agent SIGKILLs (%s)", k.controllerKills, k.controllerFreezes, k.agentKills, ended)
}

// guarded creates a Deployment spread over the nodes and a PDB keeping
// chaosMinReady of its chaosReplicas, and waits until it is ready.
func guarded(t *testing.T, c *kube.Clientset, ns, name string) {
	ctx := context.Background()
	t.Cleanup(func() {
		_ = c.AppsV1().Deployments(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = c.PolicyV1().PodDisruptionBudgets(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	labels, replicas := map[string]string{"app": name}, int32(chaosReplicas)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "app"}},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
				WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
		}}}}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	minAvail := intstr.FromInt32(chaosMinReady)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvail, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		d, err := c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && d.Status.ReadyReplicas == replicas {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Deployment %s not ready after a minute (%v)", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

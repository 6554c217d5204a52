package updateoperator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/testenv"
)

// envChaosSeed, set to an integer, replays the chaos of a failed run of
// TestRolloutUnderChaos.
const envChaosSeed = "SLIPWAY_UO_CHAOS_SEED"

// chaosMaxConcurrent is the limit the chaos test's controllers keep.
const chaosMaxConcurrent = 2

// A rollout through twelve nodes (six on each platform) by two controller
// replicas contending for a Lease, while a seeded random source stops and
// restarts the replicas and the agents at random instants. Every 0.5 s the
// fleet is sampled: never more than max-concurrent nodes cordoned or
// rebooting, never the PDB-guarded Deployment below its minAvailable; at the
// end every node runs v2, rests up to date and is not cordoned.
func TestRolloutUnderChaos(t *testing.T) {
	seed := chaosSeed(t)
	t.Logf("chaos seed %d", seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos seed %d: replay with %s=%d go test -count=1 -run TestRolloutUnderChaos ./ops/updateoperator", seed, envChaosSeed, seed)
		}
	})
	f := newFleet(t, "chaos", 12)
	f.guarded(t, "default", "chaos-web", 12, 11)
	s := f.sample("default", "chaos-web", 500*time.Millisecond)
	t.Cleanup(func() {
		if t.Failed() {
			f.dumpGuarded(t, "default", "chaos-web")
		}
	})
	replicas := []*replica{{f: f, id: "replica-a"}, {f: f, id: "replica-b"}}
	for _, r := range replicas {
		r.start()
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &chaosMonkey{f: f, rng: rand.New(rand.NewPCG(uint64(seed), 0)), replicas: replicas}
	chaosDone := make(chan struct{})
	go func() { defer close(chaosDone); k.run(ctx) }()
	defer func() {
		cancel()
		<-chaosDone
		for _, r := range replicas {
			r.stop()
		}
	}()
	eventually(t, 3*time.Minute, "every node at v2", f.done)
	cancel()
	<-chaosDone
	for _, r := range replicas {
		r.start() // every replica up again: they must leave the finished fleet alone
	}
	time.Sleep(2 * time.Second)
	if ok, why := f.done(); !ok {
		t.Errorf("after the chaos ended: %s", why)
	}
	t.Logf("chaos: %s", k.summary())
	s.check(t, chaosMaxConcurrent, 11)
	if k.agentKills == 0 || k.controllerKills == 0 {
		t.Errorf("the chaos never struck (%s): the rollout was too quick for it", k.summary())
	}
}

func chaosSeed(t *testing.T) int64 {
	if v := os.Getenv(envChaosSeed); v != "" {
		seed, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an integer seed", envChaosSeed, v)
		}
		return seed
	}
	return time.Now().UnixNano()
}

// replica is one controller replica of the Lease "chaos-update-operator".
type replica struct {
	f    *fleet
	id   string
	mu   sync.Mutex
	halt func()
}

func (r *replica) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.halt != nil {
		return
	}
	r.halt = r.f.controller(func(o *ControllerOptions) {
		o.Policy.MaxConcurrent = chaosMaxConcurrent
		o.LeaseName, o.LeaseDuration, o.Identity = "chaos-update-operator", 2*time.Second, r.id
	})
}

func (r *replica) stop() {
	r.mu.Lock()
	halt := r.halt
	r.halt = nil
	r.mu.Unlock()
	if halt != nil {
		halt()
	}
}

// chaosMonkey stops and restarts controller replicas and agents at random
// instants drawn from its seeded source.
type chaosMonkey struct {
	f                           *fleet
	rng                         *rand.Rand
	replicas                    []*replica
	mu                          sync.Mutex
	agentKills, controllerKills int
}

func (k *chaosMonkey) run(ctx context.Context) {
	for strike := 0; ; strike++ {
		wait := time.Duration(100+k.rng.IntN(900)) * time.Millisecond
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		down := time.Duration(k.rng.IntN(1500)) * time.Millisecond
		if strike%2 == 0 { // controller replicas and agents in turn; instants, victims and downtimes at random
			r := k.replicas[k.rng.IntN(len(k.replicas))]
			k.f.log.Info("chaos: stopping a controller replica", "replica", r.id, "for", down)
			r.stop()
			k.count(&k.controllerKills)
			sleepCtx(ctx, down)
			r.start()
			continue
		}
		k.killAgents(ctx, 1+k.rng.IntN(3), down)
	}
}

// killAgents stops up to n agents (not of a node in a simulated reboot:
// its agent is down already), and starts them again after down.
func (k *chaosMonkey) killAgents(ctx context.Context, n int, down time.Duration) {
	var killed []string
	for _, i := range k.rng.Perm(len(k.f.nodes))[:n] {
		node := k.f.nodes[i]
		if k.f.isRebooting(node) {
			continue
		}
		k.f.log.Info("chaos: killing an agent", "node", node, "for", down)
		k.f.stopAgent(node)
		k.count(&k.agentKills)
		killed = append(killed, node)
	}
	sleepCtx(ctx, down)
	for _, node := range killed {
		if !k.f.isRebooting(node) {
			k.f.startAgent(node)
		}
	}
}

func (k *chaosMonkey) count(n *int) {
	k.mu.Lock()
	*n++
	k.mu.Unlock()
}

func (k *chaosMonkey) summary() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return fmt.Sprintf("%d controller replica stops, %d agent kills", k.controllerKills, k.agentKills)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// sampler records, at every tick, the nodes disrupted at once (cordoned by
// the operator, rebooting, or down) and the Deployment's ready replicas.
type sampler struct {
	mu         sync.Mutex
	samples    int
	violations []string
	maxDown    int
	minReady   int32
	stop, done chan struct{}
}

func (f *fleet) sample(ns, deploy string, every time.Duration) *sampler {
	s := &sampler{minReady: 1 << 30, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			s.take(f, ns, deploy)
		}
	}()
	f.t.Cleanup(s.finish)
	return s
}

// take samples the fleet once. The Nodes are read in one list, a snapshot
// at one resourceVersion: read one by one, a sample spans the reads, and
// under load a node read cordoned before its uncordon and two read after
// their cordon made three at once that never were.
func (s *sampler) take(f *fleet, ns, deploy string) {
	ctx := context.Background()
	list, err := f.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	mine := map[string]bool{}
	for _, name := range f.nodes {
		mine[name] = true
	}
	down := map[string]bool{}
	for i := range list.Items {
		n := &list.Items[i]
		if !mine[n.Name] {
			continue
		}
		v := f.keys.View(n, "")
		if v.CordonedByUs || v.State == StateRebooting || n.Annotations[testenv.DownAnnotation] == "true" || f.isRebooting(n.Name) {
			down[n.Name] = true
		}
	}
	var ready int32 = 1 << 30
	if d, err := f.kube.AppsV1().Deployments(ns).Get(ctx, deploy, metav1.GetOptions{}); err == nil {
		ready = d.Status.ReadyReplicas
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	s.maxDown, s.minReady = max(s.maxDown, len(down)), min(s.minReady, ready)
	if len(down) > chaosMaxConcurrent {
		s.violations = append(s.violations, fmt.Sprintf("%s: %d nodes cordoned or rebooting at once: %v", time.Now().Format("15:04:05.0"), len(down), keysOf(down)))
	}
}

func (s *sampler) finish() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// check fails t on any sampled violation.
func (s *sampler) check(t *testing.T, maxConcurrent int, minReady int32) {
	t.Helper()
	s.finish()
	t.Logf("%d samples: at most %d nodes disrupted at once, the Deployment at least %d ready", s.samples, s.maxDown, s.minReady)
	for _, v := range s.violations {
		t.Errorf("max-concurrent %d broken at %s", maxConcurrent, v)
	}
	if s.minReady < minReady {
		t.Errorf("the PDB-guarded Deployment dropped to %d ready, its PDB keeps %d", s.minReady, minReady)
	}
	if s.maxDown == 0 {
		t.Error("no node was ever seen cordoned or rebooting: the samples missed the rollout")
	}
	if s.samples < 10 {
		t.Errorf("only %d samples taken", s.samples)
	}
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// dumpGuarded logs the PDB's status and where the Deployment's pods are,
// to tell a drain blocked by the PDB from one blocked by the operator.
func (f *fleet) dumpGuarded(t *testing.T, ns, name string) {
	ctx := context.Background()
	if pdb, err := f.kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		t.Logf("PDB %s: healthy %d of %d expected, desired %d, disruptions allowed %d", name, pdb.Status.CurrentHealthy,
			pdb.Status.ExpectedPods, pdb.Status.DesiredHealthy, pdb.Status.DisruptionsAllowed)
	}
	pods, err := f.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || c.Type == "Ready" && c.Status == "True"
		}
		t.Logf("pod %s on %q: phase %s ready %v deleting %v", p.Name, p.Spec.NodeName, p.Status.Phase, ready, p.DeletionTimestamp != nil)
	}
}

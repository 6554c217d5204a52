package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/testenv"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// fleetSampler records, at every tick, the nodes disrupted at once
// (cordoned by the operator, rebooting, or down) and the ready replicas of
// the guarded Deployment, and each node's steps as they change (for a
// failed test's log: where a slow rollout waited).
type fleetSampler struct {
	c          *kube.Clientset
	mu         sync.Mutex
	samples    int
	maxDown    int
	minReady   int32
	violations []string
	steps      map[string]string // each node's last step seen
	changes    []string          // the steps' changes, timed
}

// every samples until the returned func is called.
func (s *fleetSampler) every(d time.Duration) (stop func()) {
	s.minReady = 1 << 30
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			s.take()
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done }) }
}

func (s *fleetSampler) take() {
	ctx := context.Background()
	list, err := s.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.NodeRoleLabel + "=true"})
	if err != nil {
		return
	}
	var down []string
	for _, n := range list.Items {
		if drain.CordonedBy(n.Annotations) == keys.CordonOwner() || n.Annotations[keys.State()] == string(uo.StateRebooting) ||
			n.Annotations[testenv.DownAnnotation] == "true" {
			// What made it count, to tell the controller's breach from a
			// node it let go of while still down.
			a := n.Annotations
			down = append(down, fmt.Sprintf("%s (wanted %s, active %s, state %s, cordoned by %q, down %q, ready %v)", n.Name,
				a[keys.Wanted()], a[keys.Active()], a[keys.State()], drain.CordonedBy(a), a[testenv.DownAnnotation], nodeReady(&n)))
		}
	}
	s.noteSteps(list.Items)
	var ready int32 = 1 << 30
	if d, err := s.c.AppsV1().Deployments("default").Get(ctx, "kill-web", metav1.GetOptions{}); err == nil {
		ready = d.Status.ReadyReplicas
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	s.maxDown, s.minReady = max(s.maxDown, len(down)), min(s.minReady, ready)
	if len(down) > chaosConcurrent {
		sort.Strings(down)
		s.violations = append(s.violations, fmt.Sprintf("%s: %d nodes cordoned or rebooting at once: %s",
			time.Now().Format("15:04:05.0"), len(down), strings.Join(down, ", ")))
	}
}

// check fails t on any sampled violation.
// noteSteps records each node's step (wanted, active, state, reason,
// cordon) when it differs from the last one seen.
func (s *fleetSampler) noteSteps(nodes []corev1.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.steps == nil {
		s.steps = map[string]string{}
	}
	for i := range nodes {
		n := &nodes[i]
		step := stepOf(n)
		if s.steps[n.Name] != step {
			s.steps[n.Name] = step
			s.changes = append(s.changes, fmt.Sprintf("%s %s: %s", time.Now().Format("15:04:05.0"), n.Name, step))
		}
	}
}

// stepOf is where node n is in its update: the controller's intent, the
// agent's, its state, who cordoned it and why.
func stepOf(n *corev1.Node) string {
	a := n.Annotations
	return fmt.Sprintf("wanted %s, active %s, state %s, cordoned by %q, reason %q", a[keys.Wanted()], a[keys.Active()], a[keys.State()],
		drain.CordonedBy(a), a[keys.Key(uo.KeyReason)])
}

// nodeSteps is the step of each node named, from nodes.
func nodeSteps(nodes []corev1.Node, names []string) string {
	var out []string
	for i := range nodes {
		if slices.Contains(names, nodes[i].Name) {
			out = append(out, nodes[i].Name+" ("+stepOf(&nodes[i])+")")
		}
	}
	return strings.Join(out, "; ")
}

// logSteps logs the nodes' steps as the samples saw them change.
func (s *fleetSampler) logSteps(t testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("the nodes' steps as sampled:\n%s", strings.Join(s.changes, "\n"))
}

func (s *fleetSampler) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("%d samples: at most %d nodes disrupted at once, the Deployment at least %d ready", s.samples, s.maxDown, s.minReady)
	for _, v := range s.violations {
		t.Errorf("max-concurrent %d broken at %s", chaosConcurrent, v)
	}
	if s.minReady < chaosMinReady {
		t.Errorf("the PDB-guarded Deployment dropped to %d ready, its PDB keeps %d", s.minReady, chaosMinReady)
	}
	if s.maxDown == 0 {
		t.Error("no node was ever seen cordoned or rebooting: the samples missed the rollout")
	}
	if s.samples < 10 {
		t.Errorf("only %d samples taken", s.samples)
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

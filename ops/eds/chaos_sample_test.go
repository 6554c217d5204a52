package eds

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// disruptions are the nodes the chaos made unavailable itself (a pod
// deleted, failed or made not-ready, a node added): they do not count
// against the controller until a sample taken after the act shows an
// available pod there again.
type disruptions struct {
	mu sync.Mutex
	m  map[string]*disruption
}

type disruption struct {
	what string
	done time.Time // when the act returned; zero while it is under way
}

func newDisruptions() *disruptions { return &disruptions{m: map[string]*disruption{}} }

// begin marks node before the act (a sample may see the act before it returns).
func (d *disruptions) begin(node, what string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.m[node] = &disruption{what: what}
}

// end records that the act on node returned.
func (d *disruptions) end(node string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if x := d.m[node]; x != nil && x.done.IsZero() {
		x.done = time.Now()
	}
}

func (d *disruptions) snapshot() map[string]disruption {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]disruption{}
	for n, x := range d.m {
		out[n] = *x
	}
	return out
}

// recovered forgets node's disruption when its act returned before listed
// (the list that showed the node available again reflects the act).
func (d *disruptions) recovered(node string, listed time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if x := d.m[node]; x != nil && !x.done.IsZero() && x.done.Before(listed) {
		delete(d.m, node)
	}
}

// nodeView is what one sample shows of one eligible node.
type nodeView struct {
	Available bool     // a pod Running, Ready and not being deleted
	Live      []string // pods not being deleted
	Deleting  int      // pods being deleted
	Images    []string // images of the live pods
}

// judgement is what one sample says.
type judgement struct {
	// Down are the nodes without an available pod that the chaos did not
	// disrupt: the controller's doing, bounded by maxUnavailable.
	Down []string
	// Disrupted are the nodes down by the chaos's own acts.
	Disrupted int
	// Recovered are disrupted nodes available again (their marks can go).
	Recovered []string
	// Doubled are the nodes running more than one live pod.
	Doubled []string
	// Overlapping are the nodes with a live pod beside one being deleted.
	Overlapping []string
	// Images are the distinct images the live pods run.
	Images []string
}

// judge reads one sample: views by eligible node and the disruptions then.
func judge(views map[string]nodeView, marks map[string]disruption) judgement {
	var j judgement
	images := map[string]bool{}
	for node, v := range views {
		for _, img := range v.Images {
			images[img] = true
		}
		switch _, marked := marks[node]; {
		case !v.Available && marked:
			j.Disrupted++
		case !v.Available:
			j.Down = append(j.Down, node)
		case marked:
			j.Recovered = append(j.Recovered, node)
		}
		if len(v.Live) > 1 {
			j.Doubled = append(j.Doubled, node)
		}
		if len(v.Live) > 0 && v.Deleting > 0 {
			j.Overlapping = append(j.Overlapping, node)
		}
	}
	for img := range images {
		j.Images = append(j.Images, img)
	}
	for _, s := range [][]string{j.Down, j.Recovered, j.Doubled, j.Overlapping, j.Images} {
		sort.Strings(s)
	}
	return j
}

// views lists the pods of EDS name by eligible node.
func views(nodes []corev1.Node, pods []corev1.Pod) map[string]nodeView {
	out := map[string]nodeView{}
	for _, n := range nodes {
		out[n.Name] = nodeView{}
	}
	for i := range pods {
		p := &pods[i]
		v, eligible := out[nodeOf(p)]
		if !eligible {
			continue
		}
		if p.DeletionTimestamp != nil {
			v.Deleting++
		} else {
			v.Live = append(v.Live, p.Name)
			v.Images = append(v.Images, p.Spec.Containers[0].Image)
			v.Available = v.Available || (p.Status.Phase == corev1.PodRunning && podReady(p))
		}
		out[nodeOf(p)] = v
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sampler judges the EDS's pods every half second while a test runs.
type sampler struct {
	h              *harness
	name, nodeSel  string
	maxUnavailable int
	marks          *disruptions

	mu          sync.Mutex
	samples     int
	mixed       int // samples with more than one image running
	worst       int // most nodes down by the controller at once
	over        []string
	doubledAt   map[string]time.Time // node -> first sample of its current run of doubled samples
	longestDbl  time.Duration
	dblWhere    string
	overlapping int
	holders     []string // the Lease holders seen, in turn
	errs        int
}

// dupGrace is how long a node may run two live pods: a new leader whose
// cache missed its predecessor's last creation may create a second pod,
// which its next sync deletes. Longer is a defect.
const dupGrace = 3 * time.Second

func (h *harness) sample(ctx context.Context, name, nodeSel string, maxUnavailable int, marks *disruptions) (*sampler, func()) {
	s := &sampler{h: h, name: name, nodeSel: nodeSel, maxUnavailable: maxUnavailable, marks: marks, doubledAt: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := s.take(ctx); err != nil && ctx.Err() == nil {
				s.mu.Lock()
				s.errs++
				s.mu.Unlock()
			}
		}
	}()
	return s, func() { cancel(); <-done }
}

// take is one sample: the nodes and pods as one list each shows them now.
func (s *sampler) take(ctx context.Context) error {
	listed := time.Now()
	pods, err := s.h.kube.CoreV1().Pods(s.h.ns).List(ctx, metav1.ListOptions{LabelSelector: v1.LabelName + "=" + s.name})
	if err != nil {
		return err
	}
	nodes, err := s.h.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: s.nodeSel})
	if err != nil {
		return err
	}
	holder, err := s.h.leaseHolder(ctx)
	if err != nil {
		holder = ""
	}
	marks := s.marks.snapshot() // after the lists: a mark begun before an act the lists show is in it
	j := judge(views(nodes.Items, pods.Items), marks)
	for _, n := range j.Recovered {
		s.marks.recovered(n, listed)
	}
	s.record(listed, j, marks, holder)
	return nil
}

func (s *sampler) record(at time.Time, j judgement, marks map[string]disruption, holder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	if len(j.Images) > 1 {
		s.mixed++
	}
	if holder != "" && (len(s.holders) == 0 || s.holders[len(s.holders)-1] != holder) {
		s.holders = append(s.holders, holder)
	}
	s.worst = max(s.worst, len(j.Down))
	if len(j.Down) > s.maxUnavailable {
		s.over = append(s.over, fmt.Sprintf("%s: %d nodes down by the controller %v (disrupted by the test: %d, marks %v)",
			at.Format("15:04:05.000"), len(j.Down), j.Down, j.Disrupted, marks))
	}
	s.overlapping += len(j.Overlapping)
	doubled := map[string]bool{}
	for _, n := range j.Doubled {
		doubled[n] = true
		if _, ok := s.doubledAt[n]; !ok {
			s.doubledAt[n] = at
		}
		if d := at.Sub(s.doubledAt[n]); d > s.longestDbl {
			s.longestDbl, s.dblWhere = d, fmt.Sprintf("node %s since %s", n, s.doubledAt[n].Format("15:04:05.000"))
		}
	}
	for n := range s.doubledAt {
		if !doubled[n] {
			delete(s.doubledAt, n)
		}
	}
}

// check fails t for every sample over maxUnavailable, a node that ran two
// pods longer than dupGrace, and a sampling that missed the rollouts.
func (s *sampler) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("%d samples (%d failed reads), %d during a rollout: at worst %d nodes down by the controller (maxUnavailable %d); "+
		"longest run of two live pods on a node %v; %d node-samples with a live pod beside a deleting one; Lease holders in turn %v",
		s.samples, s.errs, s.mixed, s.worst, s.maxUnavailable, s.longestDbl, s.overlapping, s.holders)
	for _, o := range s.over {
		t.Errorf("over maxUnavailable %d at %s", s.maxUnavailable, o)
	}
	if s.longestDbl > dupGrace {
		t.Errorf("two live pods on one node for %v (%s); a duplicate must go within %v", s.longestDbl, s.dblWhere, dupGrace)
	}
	if s.mixed == 0 || s.samples < 20 {
		t.Errorf("%d samples, %d of them during a rollout: the sampling missed the rollouts", s.samples, s.mixed)
	}
}

func (s *sampler) leaders() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{}, s.holders...)
}

func distinct(ss []string) int {
	seen := map[string]bool{}
	for _, s := range ss {
		seen[s] = true
	}
	return len(seen)
}

// rolledOutExactly: each of nodes runs exactly one pod of EDS name, of
// image, Running and Ready, and no pod of it is anywhere else; the status
// says Running with every count at len(nodes); the only ERS left is the
// active one, of image, marked active and with no canary condition true.
func (h *harness) rolledOutExactly(name, image string, nodes []string) (bool, string) {
	ctx := context.Background()
	pods, err := h.kube.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: v1.LabelName + "=" + name})
	if err != nil {
		return false, err.Error()
	}
	on := map[string][]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Spec.Containers[0].Image != image || p.Status.Phase != corev1.PodRunning || !podReady(p) {
			return false, fmt.Sprintf("pod %s on %s: %s, %s, ready %v, deleting %v", p.Name, nodeOf(p), p.Spec.Containers[0].Image, p.Status.Phase, podReady(p), p.DeletionTimestamp != nil)
		}
		on[nodeOf(p)] = append(on[nodeOf(p)], p.Name)
	}
	for _, n := range nodes {
		if len(on[n]) != 1 {
			return false, fmt.Sprintf("node %s runs %v", n, on[n])
		}
		delete(on, n)
	}
	if len(on) > 0 {
		return false, fmt.Sprintf("pods on nodes not selected: %v", on)
	}
	e, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	n, st := int32(len(nodes)), e.Status
	if st.State != v1.StateRunning || st.Canary != nil || st.Desired != n || st.Current != n || st.Ready != n || st.Available != n || st.UpToDate != n || st.ObservedGeneration != e.Generation {
		return false, fmt.Sprintf("status %+v", st)
	}
	return h.onlyActiveERS(name, image, st.ActiveReplicaSet, n)
}

func (h *harness) onlyActiveERS(name, image, active string, n int32) (bool, string) {
	list, err := h.eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(h.ns).List(context.Background(), metav1.ListOptions{LabelSelector: v1.LabelEDSOwner + "=" + name})
	if err != nil {
		return false, err.Error()
	}
	if len(list.Items) != 1 {
		var names []string
		for _, s := range list.Items {
			names = append(names, s.Name+"/"+string(s.Status.Status))
		}
		return false, fmt.Sprintf("ERSs %v, want only the active %s", names, active)
	}
	s := list.Items[0]
	if s.Name != active || s.Spec.Template.Spec.Containers[0].Image != image || s.Status.Status != v1.ReplicaSetStatusActive || s.Status.Available != n {
		return false, fmt.Sprintf("ERS %s (%s): status %+v; want the active one, %s", s.Name, s.Spec.Template.Spec.Containers[0].Image, s.Status, active)
	}
	for _, c := range s.Status.Conditions {
		if c.Status == metav1.ConditionTrue && (c.Type == v1.ConditionCanaryPaused || c.Type == v1.ConditionCanaryFailed) {
			return false, fmt.Sprintf("ERS %s: condition %s true: %s", s.Name, c.Type, c.Message)
		}
	}
	return true, ""
}

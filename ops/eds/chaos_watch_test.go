package eds

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// sampler judges the pods of an EDS while a test runs, two ways: every
// half second from a fresh list of the nodes and pods (a consistent
// snapshot), and at every event of a pod watch (no transient state is
// missed; marks cleared by the polls stay in force watchLag longer).
type sampler struct {
	h             *harness
	name, nodeSel string
	marks         *disruptions

	mu          sync.Mutex
	poll, watch *tally
	eligible    map[string]bool        // the nodes of the last poll
	pods        map[string]*corev1.Pod // the watch's view
	holders     []string               // the Lease holders seen, in turn
	takeovers   []time.Time            // the Lease's acquire times seen
	errs        int
}

func (h *harness) sample(name, nodeSel string, maxUnavailable int, marks *disruptions) (*sampler, func()) {
	h.t.Helper()
	s := &sampler{h: h, name: name, nodeSel: nodeSel, marks: marks,
		poll: newTally("poll", maxUnavailable), watch: newTally("watch", maxUnavailable)}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.takePoll(ctx); err != nil {
		h.t.Fatal(err)
	}
	rv, err := s.relist(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.polls(ctx) }()
	go func() { defer wg.Done(); s.watches(ctx, rv) }()
	var once sync.Once
	return s, func() { once.Do(func() { cancel(); wg.Wait() }) }
}

func (s *sampler) selector() metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: v1.LabelName + "=" + s.name}
}

func (s *sampler) polls(ctx context.Context) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := s.takePoll(ctx); err != nil && ctx.Err() == nil {
			s.mu.Lock()
			s.errs++
			s.mu.Unlock()
		}
	}
}

// takePoll is one sample: the nodes and pods as one list each shows them now.
func (s *sampler) takePoll(ctx context.Context) error {
	listed := time.Now()
	pods, err := s.h.kube.CoreV1().Pods(s.h.ns).List(ctx, s.selector())
	if err != nil {
		return err
	}
	nodes, err := s.h.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: s.nodeSel})
	if err != nil {
		return err
	}
	holder, acquired, _ := s.h.leaseHolder(ctx)
	eligible := map[string]bool{}
	for _, n := range nodes.Items {
		eligible[n.Name] = true
	}
	var ps []*corev1.Pod
	for i := range pods.Items {
		ps = append(ps, &pods.Items[i])
	}
	marks := s.marks.snapshot(time.Now(), 0) // after the lists: a mark begun before an act the lists show is in it
	j := judge(views(eligible, ps), marks)
	for _, n := range j.Recovered {
		s.marks.recovered(n, listed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eligible = eligible
	s.poll.add(listed, j, marks)
	if holder != "" && (len(s.holders) == 0 || s.holders[len(s.holders)-1] != holder) {
		s.holders = append(s.holders, holder)
	}
	if !acquired.IsZero() && !slices.ContainsFunc(s.takeovers, acquired.Equal) {
		s.takeovers = append(s.takeovers, acquired)
	}
	return nil
}

// relist replaces the watch's view with a fresh list and returns its resourceVersion.
func (s *sampler) relist(ctx context.Context) (string, error) {
	list, err := s.h.kube.CoreV1().Pods(s.h.ns).List(ctx, s.selector())
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = map[string]*corev1.Pod{}
	for i := range list.Items {
		s.pods[list.Items[i].Name] = &list.Items[i]
	}
	return list.ResourceVersion, nil
}

// watches judges after every pod event until ctx ends, watching again
// from a new list when the watch ends.
func (s *sampler) watches(ctx context.Context, rv string) {
	for ctx.Err() == nil {
		opts := s.selector()
		opts.ResourceVersion = rv
		w, err := s.h.kube.CoreV1().Pods(s.h.ns).Watch(ctx, opts)
		if err == nil {
			s.follow(w)
		}
		if ctx.Err() != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
		if rv, err = s.relist(ctx); err != nil {
			rv = ""
		}
	}
}

func (s *sampler) follow(w watch.Interface) {
	defer w.Stop()
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			return // an error event: list and watch again
		}
		s.mu.Lock()
		if ev.Type == watch.Deleted {
			delete(s.pods, p.Name)
		} else {
			s.pods[p.Name] = p
		}
		var ps []*corev1.Pod
		for _, x := range s.pods {
			ps = append(ps, x)
		}
		marks := s.marks.snapshot(time.Now(), watchLag)
		s.watch.add(time.Now(), judge(views(s.eligible, ps), marks), marks)
		s.mu.Unlock()
	}
}

// check fails t for what either way of sampling found, and when they
// missed the rollouts.
func (s *sampler) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("Lease holders in turn %v, %d takeovers; %d failed polls", s.holders, len(s.takeovers), s.errs)
	s.poll.check(t, s.takeovers)
	s.watch.check(t, s.takeovers)
	if s.poll.mixed == 0 || s.poll.judged < 20 || s.watch.mixed == 0 {
		t.Errorf("polls %d (%d during a rollout), watch events during a rollout %d: the sampling missed the rollouts",
			s.poll.judged, s.poll.mixed, s.watch.mixed)
	}
	if s.watch.worst < 1 {
		t.Errorf("the watch never saw a node down by the controller (worst %d): it missed the rollouts", s.watch.worst)
	}
}

// noteHolder records holder as the Lease's holder now, if it is a change.
func (s *sampler) noteHolder(holder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.holders) == 0 || s.holders[len(s.holders)-1] != holder {
		s.holders = append(s.holders, holder)
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

package eds

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// disruptions are the nodes the chaos made unavailable itself (a pod
// deleted, failed or made not-ready, a node added): they do not count
// against the controller until a list taken after the act shows an
// available pod there again.
type disruptions struct {
	mu sync.Mutex
	m  map[string]*disruption
}

type disruption struct {
	what    string
	done    time.Time // when the act returned; zero while it is under way
	cleared time.Time // when a list showed the node available again; zero until then
}

// watchLag is how long after a mark is cleared the watch still honours
// it: an event the watch delivers late may show the node as the act left it.
const watchLag = 2 * time.Second

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

// snapshot are the marks in force at now: not cleared, or cleared less
// than lag ago.
func (d *disruptions) snapshot(now time.Time, lag time.Duration) map[string]disruption {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]disruption{}
	for n, x := range d.m {
		if x.cleared.IsZero() || now.Sub(x.cleared) < lag {
			out[n] = *x
		}
	}
	return out
}

// recovered clears node's mark when its act returned before listed (the
// list that showed the node available again reflects the act).
func (d *disruptions) recovered(node string, listed time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if x := d.m[node]; x != nil && !x.done.IsZero() && x.done.Before(listed) && x.cleared.IsZero() {
		x.cleared = time.Now()
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

// views sorts the pods of an EDS by eligible node.
func views(nodes map[string]bool, pods []*corev1.Pod) map[string]nodeView {
	out := map[string]nodeView{}
	for n := range nodes {
		out[n] = nodeView{}
	}
	for _, p := range pods {
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

// tally is what a series of judgements found.
type tally struct {
	source         string
	maxUnavailable int
	judged, mixed  int // judgements, and those with more than one image running
	worst          int // most nodes down by the controller at once
	over           []string
	doubledAt      map[string]time.Time // node -> when its current run of two live pods began
	longestDbl     time.Duration
	dblWhere       string
	overlapping    int
	twoPods        []twoPods // judgements showing two pods on a node
}

// twoPods is a judgement that showed two pods on a node.
type twoPods struct {
	at   time.Time
	what string
}

// dupGrace is how long a node may run two live pods: a new leader whose
// cache missed its predecessor's last creation may create a second pod,
// which its next sync deletes. Longer is a defect.
const dupGrace = 3 * time.Second

// takeoverGrace is how long after a replica took the Lease a node may show
// two pods at all (live, or live beside one being deleted): the planner
// never creates a node's pod before its old one is gone, so at other
// times it is a defect, however short. (A replica restarted under the
// same identity renews the Lease without taking it; its caches start
// from a consistent list.)
const takeoverGrace = 5 * time.Second

func newTally(source string, maxUnavailable int) *tally {
	return &tally{source: source, maxUnavailable: maxUnavailable, doubledAt: map[string]time.Time{}}
}

// add records judgement j made at at (marks: the disruptions then in force).
func (t *tally) add(at time.Time, j judgement, marks map[string]disruption) {
	t.judged++
	if len(j.Doubled)+len(j.Overlapping) > 0 && len(t.twoPods) < 500 {
		t.twoPods = append(t.twoPods, twoPods{at: at, what: fmt.Sprintf("two live pods on %v, a live pod beside a deleting one on %v", j.Doubled, j.Overlapping)})
	}
	if len(j.Images) > 1 {
		t.mixed++
	}
	t.worst = max(t.worst, len(j.Down))
	if len(j.Down) > t.maxUnavailable && len(t.over) < 20 {
		t.over = append(t.over, fmt.Sprintf("%s (%s): %d nodes down by the controller %v (disrupted by the test: %d %v)",
			at.Format("15:04:05.000"), t.source, len(j.Down), j.Down, j.Disrupted, marksString(marks)))
	}
	t.overlapping += len(j.Overlapping)
	doubled := map[string]bool{}
	for _, n := range j.Doubled {
		doubled[n] = true
		if _, ok := t.doubledAt[n]; !ok {
			t.doubledAt[n] = at
		}
		if d := at.Sub(t.doubledAt[n]); d > t.longestDbl {
			t.longestDbl, t.dblWhere = d, fmt.Sprintf("node %s since %s", n, t.doubledAt[n].Format("15:04:05.000"))
		}
	}
	for n := range t.doubledAt {
		if !doubled[n] {
			delete(t.doubledAt, n)
		}
	}
}

// check fails tt for every judgement over maxUnavailable, a node that ran
// two live pods longer than dupGrace, and two pods on a node not within
// takeoverGrace after one of takeovers (when a replica took the Lease).
func (t *tally) check(tt *testing.T, takeovers []time.Time) {
	tt.Helper()
	tt.Logf("%s: %d judgements, %d during a rollout: at worst %d nodes down by the controller (maxUnavailable %d); "+
		"longest run of two live pods on a node %v; %d node-judgements with a live pod beside a deleting one",
		t.source, t.judged, t.mixed, t.worst, t.maxUnavailable, t.longestDbl, t.overlapping)
	for _, o := range t.over {
		tt.Errorf("over maxUnavailable %d at %s", t.maxUnavailable, o)
	}
	unexplained := 0
	for _, p := range t.twoPods {
		if !slices.ContainsFunc(takeovers, func(a time.Time) bool { return !p.at.Before(a) && p.at.Sub(a) <= takeoverGrace }) && unexplained < 20 {
			unexplained++
			tt.Errorf("%s (%s): %s, not within %v after a takeover of the Lease (takeovers at %v)", p.at.Format("15:04:05.000"), t.source, p.what, takeoverGrace, clock(takeovers))
		}
	}
	if t.longestDbl > dupGrace {
		tt.Errorf("%s: two live pods on one node for %v (%s); a duplicate must go within %v", t.source, t.longestDbl, t.dblWhere, dupGrace)
	}
}

func marksString(marks map[string]disruption) string {
	var out []string
	for n, m := range marks {
		out = append(out, n+": "+m.what)
	}
	sort.Strings(out)
	return fmt.Sprint(out)
}

func clock(ts []time.Time) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Format("15:04:05.000"))
	}
	return out
}

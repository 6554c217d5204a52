package fleettest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/protocol"
)

// The fleet's channel, and what a test waits for and asserts on it.

// Channel creates the fleet's UpdateChannel.
func (f *Fleet) Channel(spec v1.UpdateChannelSpec) {
	f.T.Helper()
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: f.NS}, Spec: spec}
	if _, err := f.Ops.OpsV1().UpdateChannels(f.NS).Create(context.Background(), ch, metav1.CreateOptions{}); err != nil {
		f.T.Fatal(err)
	}
}

// Get reads the fleet's channel.
func (f *Fleet) Get() *v1.UpdateChannel {
	ch, err := f.Ops.OpsV1().UpdateChannels(f.NS).Get(context.Background(), "default", metav1.GetOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	return ch
}

// WaitFor watches the channel until cond holds or timeout passes.
func (f *Fleet) WaitFor(what string, timeout time.Duration, cond func(*v1.UpdateChannel) bool) *v1.UpdateChannel {
	f.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		ch := f.Get()
		if cond(ch) {
			return ch
		}
		w, err := f.Ops.OpsV1().UpdateChannels(f.NS).Watch(ctx, metav1.ListOptions{ResourceVersion: ch.ResourceVersion,
			FieldSelector: "metadata.name=default"})
		if err != nil {
			f.T.Fatalf("waiting for %s: %v; status: %+v", what, err, ch.Status)
		}
		select {
		case <-w.ResultChan():
		case <-ctx.Done():
			w.Stop()
			var holders []string
			for _, s := range ch.Status.Updating {
				holders = append(holders, s.Node)
			}
			f.DumpLogs(holders...)
			f.T.Fatalf("timed out waiting for %s; status: %+v", what, f.Get().Status)
		}
		w.Stop()
	}
}

// Holds fails the test when cond stops holding at any change of the channel
// within window: the way to see that something does NOT happen.
func (f *Fleet) Holds(what string, window time.Duration, cond func(*v1.UpdateChannel) bool) {
	f.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	for ctx.Err() == nil {
		ch := f.Get()
		if !cond(ch) {
			f.T.Fatalf("%s: broken; status: %+v", what, ch.Status)
		}
		w, err := f.Ops.OpsV1().UpdateChannels(f.NS).Watch(ctx, metav1.ListOptions{ResourceVersion: ch.ResourceVersion,
			FieldSelector: "metadata.name=default"})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.T.Fatalf("watching that %s: %v", what, err)
		}
		for ev := range w.ResultChan() {
			if c, ok := ev.Object.(*v1.UpdateChannel); ok && !cond(c) {
				w.Stop()
				f.T.Fatalf("%s: broken; status: %+v", what, c.Status)
			}
		}
		w.Stop() // closed by the window's end, or by the server: watch again
	}
}

// ZeroDelay is a zero rebootDelay.
func ZeroDelay() *metav1.Duration { return &metav1.Duration{} }

// IsTrue reports whether ch has condition t True.
func IsTrue(ch *v1.UpdateChannel, t string) bool {
	return meta.IsStatusConditionTrue(ch.Status.Conditions, t)
}

// Done is the condition of a rollout of n nodes complete: all up to date, no slot held.
func Done(n int) func(*v1.UpdateChannel) bool {
	return func(ch *v1.UpdateChannel) bool {
		return ch.Status.Counts.UpToDate == n && ch.Status.Counts.Nodes == n && len(ch.Status.Updating) == 0 && IsTrue(ch, v1.ConditionComplete)
	}
}

// Watcher records, from watches, the most slots held and nodes cordoned at any instant.
type Watcher struct {
	mu          sync.Mutex
	maxSlots    int
	maxCordoned int
	cordoned    map[string]bool
	bad         []string
}

// Watch watches the fleet's channel and nodes until ctx ends.
func (f *Fleet) Watch(ctx context.Context) *Watcher {
	w := &Watcher{cordoned: map[string]bool{}}
	cw, err := f.Ops.OpsV1().UpdateChannels(f.NS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	nw, err := f.Kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: "fleet=" + f.NS})
	if err != nil {
		f.T.Fatal(err)
	}
	go func() {
		for ev := range cw.ResultChan() {
			ch, ok := ev.Object.(*v1.UpdateChannel)
			if !ok {
				continue
			}
			w.mu.Lock()
			w.maxSlots = max(w.maxSlots, len(ch.Status.Updating))
			seen := map[string]bool{}
			for _, s := range ch.Status.Updating {
				if seen[s.Node] || !strings.HasPrefix(s.Node, f.NS+"-n") {
					w.bad = append(w.bad, fmt.Sprintf("bad slot list %+v", ch.Status.Updating))
				}
				seen[s.Node] = true
			}
			w.mu.Unlock()
		}
	}()
	go func() {
		for ev := range nw.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			w.mu.Lock()
			w.cordoned[n.Name] = n.Spec.Unschedulable && ev.Type != watch.Deleted
			c := 0
			for _, on := range w.cordoned {
				if on {
					c++
				}
			}
			w.maxCordoned = max(w.maxCordoned, c)
			w.mu.Unlock()
		}
	}()
	return w
}

// Check fails t when the watch saw more slots held or nodes cordoned at once than concurrency.
func (w *Watcher) Check(t *testing.T, concurrency int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("most slots held at once: %d, most nodes cordoned at once: %d (concurrency %d)", w.maxSlots, w.maxCordoned, concurrency)
	if w.maxSlots > concurrency || w.maxCordoned > concurrency {
		t.Errorf("over concurrency: %d slots, %d cordoned, concurrency %d", w.maxSlots, w.maxCordoned, concurrency)
	}
	if w.maxSlots == 0 {
		t.Error("the watch never saw a slot: the test did not observe the rollout")
	}
	for _, b := range w.bad {
		t.Error(b)
	}
}

// AssertAllAt fails the test unless every node runs version, labelled so and uncordoned.
func (f *Fleet) AssertAllAt(version string) {
	f.T.Helper()
	nodes, err := f.Kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "fleet=" + f.NS})
	if err != nil {
		f.T.Fatal(err)
	}
	for _, n := range nodes.Items {
		if got := f.Current(n.Name); got != version {
			f.T.Errorf("node %s: current is %s, want %s", n.Name, got, version)
		}
		if n.Spec.Unschedulable || n.Annotations[drain.AnnotationCordonedBy] != "" {
			f.T.Errorf("node %s left cordoned", n.Name)
		}
		if n.Labels[protocol.LabelRootfsVersion] != version {
			f.T.Errorf("node %s: label %s=%q, want %s", n.Name, protocol.LabelRootfsVersion, n.Labels[protocol.LabelRootfsVersion], version)
		}
	}
}

// Events waits (watching, up to 30 s) until at least want events of reason
// were recorded, and returns how many there are.
func (f *Fleet) Events(reason string, want int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := metav1.ListOptions{FieldSelector: "reason=" + reason}
	for {
		l, err := f.Kube.CoreV1().Events(f.NS).List(ctx, opts)
		if err != nil {
			return 0
		}
		n := 0
		for _, e := range l.Items {
			n += int(max(e.Count, 1))
		}
		if n >= want {
			return n
		}
		opts.ResourceVersion = l.ResourceVersion
		w, err := f.Kube.CoreV1().Events(f.NS).Watch(ctx, opts)
		if err != nil {
			return n
		}
		select {
		case <-w.ResultChan():
		case <-ctx.Done():
		}
		w.Stop()
		if ctx.Err() != nil {
			return n
		}
		opts.ResourceVersion = ""
	}
}

// Patch merge-patches the fleet's channel.
func (f *Fleet) Patch(mergePatch string) {
	f.T.Helper()
	_, err := f.Ops.OpsV1().UpdateChannels(f.NS).Patch(context.Background(), "default", "application/merge-patch+json", []byte(mergePatch), metav1.PatchOptions{})
	if err != nil {
		f.T.Fatalf("patch the channel with %s: %v", mergePatch, err)
	}
}

// EventsWithin is events with a shorter wait.
func (f *Fleet) EventsWithin(reason string, want int, wait time.Duration) int {
	deadline := time.Now().Add(wait)
	n := 0
	for time.Now().Before(deadline) {
		l, err := f.Kube.CoreV1().Events(f.NS).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil {
			f.T.Fatal(err)
		}
		n = 0
		for _, e := range l.Items {
			n += int(max(e.Count, 1))
		}
		if n >= want {
			return n
		}
		time.Sleep(200 * time.Millisecond)
	}
	return n
}

package agent

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
)

func TestSlotPodExpired(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pod := func(node string, phase corev1.PodPhase, finishedAgo time.Duration) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "upgrade-6-node-a-v2-1",
			Labels:      map[string]string{protocol.LabelAppName: protocol.LabelAppNameUpgrade},
			Annotations: map[string]string{protocol.AnnotationJobNode: node}, CreationTimestamp: metav1.NewTime(now.Add(-48 * time.Hour))},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
		if phase == corev1.PodSucceeded || phase == corev1.PodFailed {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				FinishedAt: metav1.NewTime(now.Add(-finishedAgo))}}}}
		}
		return p
	}
	day := jobTTL * time.Second
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"succeeded a day and a minute ago", pod("node-a", corev1.PodSucceeded, day+time.Minute), true},
		{"failed a day and a minute ago", pod("node-a", corev1.PodFailed, day+time.Minute), true},
		{"succeeded an hour ago: kept for its log", pod("node-a", corev1.PodSucceeded, time.Hour), false},
		{"running two days: a deadline's, not the sweep's", pod("node-a", corev1.PodRunning, 0), false},
		{"another node's", pod("node-b", corev1.PodSucceeded, 2*day), false},
		{"a Job's pod", func() *corev1.Pod {
			p := pod("node-a", corev1.PodSucceeded, 2*day)
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", Name: "stage-6-node-a-v2", UID: "u"}}
			return p
		}(), false},
		{"being deleted", func() *corev1.Pod {
			p := pod("node-a", corev1.PodSucceeded, 2*day)
			p.DeletionTimestamp = &metav1.Time{Time: now}
			return p
		}(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := slotPodExpired(tc.pod, "node-a", now); got != tc.want {
				t.Errorf("slotPodExpired = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSlotPodsAreTheirJobsPods: each slot Pod is what the Job controller
// would have made of the slot's Job: the Job's pod spec, bound to the
// node, the Job's deadline on the Pod, the Job's name, labels and
// annotations (the AppArmor beta annotation under the webhook
// isolation), and no owner.
func TestSlotPodsAreTheirJobsPods(t *testing.T) {
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "slipway-system", UID: "c-uid"},
		Spec: v1.UpdateChannelSpec{URL: "https://github.com/rancher/k3os/releases", Version: "v2"}}
	slot := v1.Slot{Node: "node-a", Version: "v2", Attempt: 1, Since: metav1.NewTime(time.Unix(1e9, 0))}
	for _, isolation := range []string{process.IsolationPolicy, process.IsolationWebhook} {
		opts := Options{NodeName: "node-a", Image: "slipway:test", Isolation: isolation}
		pods, err := SlotPods(opts, ch, slot)
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := Jobs(opts, ch, slot)
		if err != nil {
			t.Fatal(err)
		}
		for kind, p := range pods {
			j := jobs[kind]
			switch {
			case p.Name != j.Name || p.Namespace != j.Namespace || p.Spec.NodeName != "node-a":
				t.Errorf("%s/%s: pod %s/%s on %q, want %s/%s on node-a", isolation, kind, p.Namespace, p.Name, p.Spec.NodeName, j.Namespace, j.Name)
			case p.Spec.ActiveDeadlineSeconds == nil || *p.Spec.ActiveDeadlineSeconds != *j.Spec.ActiveDeadlineSeconds:
				t.Errorf("%s/%s: deadline %v, want the Job's %d", isolation, kind, p.Spec.ActiveDeadlineSeconds, *j.Spec.ActiveDeadlineSeconds)
			case len(p.OwnerReferences) != 0:
				t.Errorf("%s/%s: owners %v", isolation, kind, p.OwnerReferences)
			case !protocol.SlotPodOfNode(p, "node-a"):
				t.Errorf("%s/%s: not a slot Pod of its node to its readers", isolation, kind)
			}
			spec := p.Spec.DeepCopy()
			spec.ActiveDeadlineSeconds = nil
			if !equality.Semantic.DeepEqual(*spec, j.Spec.Template.Spec) {
				t.Errorf("%s/%s: the pod spec is not the Job's template's", isolation, kind)
			}
			for k, v := range j.Spec.Template.Annotations {
				if p.Annotations[k] != v {
					t.Errorf("%s/%s: annotation %s %q, want the template's %q", isolation, kind, k, p.Annotations[k], v)
				}
			}
		}
	}
}

// TestFinishedSlotPodsSweptAfterADay: a rollout through two nodes under
// the manifest's RBAC and policies leaves each node's slot Pod; a day
// later by its clock, node-0's agent deletes its own finished Pod, with
// its own token, and leaves node-1's (and node-1's agent its).
func TestFinishedSlotPodsSweptAfterADay(t *testing.T) {
	t.Parallel()
	var sweepLists atomic.Int32 // the lists of a sweep (its selector names the upgrade app), by the agents and the sweepers below
	f := newFleet(t, 2, func(o *Options) {
		if o.Config != nil { // an agent's options, not the controller's
			o.Config = countingSweepLists(o.Config, &sweepLists)
		}
	})
	mirror := t.TempDir() // a release source the manifest allows
	f.AsServiceAccount(manifest.Options{MirrorDirs: []string{mirror}})
	n0, n1 := f.NS+"-n0", f.NS+"-n1"
	f.Start(n0)
	f.Start(n1)
	f.Channel(v1.UpdateChannelSpec{URL: "file://" + mirror, Version: "v2", Concurrency: 2, RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	f.WaitFor("all at v2", time.Minute, fleettest.Done(2))
	slotPods := func() map[string]string { // node -> its slot Pod's name
		slots, _, _ := f.JobsByAction()
		out := map[string]string{}
		for node, jobs := range slots {
			for _, j := range jobs {
				out[node] = j.Name
			}
		}
		return out
	}
	before := slotPods()
	if len(before) != 2 {
		t.Fatalf("slot Pods after the rollout: %v, want one per node", before)
	}
	sweeper := func(node string) *Agent {
		a, err := New(Options{NodeName: node, Namespace: f.NS, Config: countingSweepLists(f.Configs[node], &sweepLists), Image: "slipway:test", SystemDir: t.TempDir(),
			Rebooter: &fleettest.SimReboot{F: f.Fleet, Node: node}}) // never asked to reboot: it only sweeps
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if n := sweepLists.Load(); n != 0 {
		t.Errorf("the agents listed their slot pods %d times at their starts (two each): the sweep at start reads the work watches", n)
	}
	a0 := sweeper(n0)
	if err := a0.sweepSlotPods(t.Context(), time.Now().Add(time.Hour), a0.listSlotPods); err != nil {
		t.Fatal(err)
	}
	if got := slotPods(); len(got) != 2 {
		t.Fatalf("an hour after: %v left, want both (kept a day for their logs)", got)
	}
	// The sweep at start reads the work watches' cache: here an informer
	// of every pod of both nodes, filled from the API server.
	podInf := process.NewInformer(f.Kube.CoreV1().Pods(f.NS), &corev1.Pod{}, 0, func(*metav1.ListOptions) {})
	go podInf.RunWithContext(t.Context())
	if !process.WaitSynced(t.Context(), podInf) {
		t.Fatal("the pod informer did not sync")
	}
	a0.watches.open, a0.watches.informers, a0.watches.pods = true, []cache.SharedIndexInformer{podInf}, ownPods{podInf.GetStore(), n0}
	lists := sweepLists.Load()
	if err := a0.sweepSlotPods(t.Context(), time.Now().Add(25*time.Hour), a0.slotPodsWatched); err != nil {
		t.Fatal(err)
	}
	if n := sweepLists.Load() - lists; n != 0 {
		t.Errorf("the sweep from filled work watches listed the pods %d times, want none", n)
	}
	if got := slotPods(); got[n0] != "" || got[n1] != before[n1] {
		t.Fatalf("a day after, node-0's sweep left %v, want node-1's %s only", got, before[n1])
	}
	a1 := sweeper(n1) // its watches closed: the sweep lists
	lists = sweepLists.Load()
	if err := a1.sweepSlotPods(t.Context(), time.Now().Add(25*time.Hour), a1.slotPodsWatched); err != nil {
		t.Fatal(err)
	}
	if n := sweepLists.Load() - lists; n != 1 {
		t.Errorf("the sweep with the work watches closed listed the pods %d times, want once", n)
	}
	if got := slotPods(); len(got) != 0 {
		t.Fatalf("a day after, node-1's sweep left %v", got)
	}
}

// TestWebhookIsolationKeepsSlotJobs: under the webhook isolation (API
// servers before 1.30, no right to create pods) a slot's work is a Job,
// as before slot Pods.
func TestWebhookIsolationKeepsSlotJobs(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, func(o *Options) { o.Isolation = process.IsolationWebhook })
	node := f.NS + "-n0"
	f.Start(node)
	f.Channel(v1.UpdateChannelSpec{URL: "file:///unused", Version: "v2", RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	f.WaitFor("at v2", time.Minute, fleettest.Done(1))
	jobs, err := f.Kube.BatchV1().Jobs(f.NS).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := f.Kube.CoreV1().Pods(f.NS).List(t.Context(), metav1.ListOptions{LabelSelector: protocol.LabelAppName + "=" + protocol.LabelAppNameUpgrade})
	if err != nil {
		t.Fatal(err)
	}
	slotJobs := 0
	for _, j := range jobs.Items {
		if strings.HasPrefix(j.Name, protocol.JobKindUpgrade+"-") {
			slotJobs++
		}
	}
	if slotJobs != 1 || len(pods.Items) != 0 {
		t.Errorf("%d slot Jobs and %d upgrade pods, want the slot's Job and no pod of the agent's", slotJobs, len(pods.Items))
	}
}

// countingSweepLists is cfg with every list of slot Pods by a sweep (its
// selector names the upgrade app; the pod informer's names the node only)
// counted in n.
func countingSweepLists(cfg *rest.Config, n *atomic.Int32) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/pods") && strings.Contains(r.URL.Query().Get("labelSelector"), protocol.LabelAppName) {
				n.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	return cfg
}

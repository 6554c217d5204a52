package plan

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/window"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func settings(t *testing.T, spec v1.UpdateChannelSpec) Settings {
	t.Helper()
	if spec.URL == "" {
		spec.URL = "file:///m"
	}
	s, bad := Resolve(spec)
	if bad != nil {
		t.Fatal(bad)
	}
	return s
}

func nodes(n int, version string) []Node {
	var out []Node
	for i := 0; i < n; i++ {
		out = append(out, Node{Name: fmt.Sprintf("node%d", i), UID: fmt.Sprintf("uid-%d", i), Version: version,
			Labels: map[string]string{"pool": map[bool]string{true: "a", false: "b"}[i%2 == 0]}})
	}
	return out
}

func names(ns []Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}

func TestTarget(t *testing.T) {
	for _, tc := range []struct {
		version, latest, want string
	}{
		{"", "v2", "v2"}, {"latest", "v2", "v2"}, {"v3", "v2", "v3"}, {"", "", ""},
	} {
		s := settings(t, v1.UpdateChannelSpec{Version: tc.version})
		if got := Target(s, v1.UpdateChannelStatus{LatestVersion: tc.latest}); got != tc.want {
			t.Errorf("Target(%q, %q) = %q, want %q", tc.version, tc.latest, got, tc.want)
		}
	}
}

func TestPollDue(t *testing.T) {
	polled := func(ago time.Duration) *metav1.Time { v := metav1.NewTime(now.Add(-ago)); return &v }
	for _, tc := range []struct {
		name    string
		version string
		last    *metav1.Time
		want    bool
	}{
		{"never polled", "", nil, true},
		{"polled recently", "", polled(time.Minute), false},
		{"interval passed", "latest", polled(15 * time.Minute), true},
		{"pinned version never polls", "v2", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := settings(t, v1.UpdateChannelSpec{Version: tc.version})
			if got := PollDue(s, v1.UpdateChannelStatus{LastPolled: tc.last}, now); got != tc.want {
				t.Fatalf("PollDue = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCandidates(t *testing.T) {
	closed, _ := window.Parse(nil, "01:00", "02:00", "UTC")
	open, _ := window.Parse(nil, "11:00", "13:00", "UTC")
	failed := func(node, version string, attempts int, ago time.Duration) v1.Failure {
		return v1.Failure{Node: node, Version: version, Attempts: attempts, At: metav1.NewTime(now.Add(-ago))}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Settings, *v1.UpdateChannelStatus, []Node)
		count int
		skip  []string // must not be candidates
		want  []string // must be candidates
	}{
		{"all behind", func(*Settings, *v1.UpdateChannelStatus, []Node) {}, 6, nil, nil},
		{"up to date and unknown skipped", func(_ *Settings, _ *v1.UpdateChannelStatus, ns []Node) {
			ns[0].Version, ns[1].Version = "v2", ""
		}, 4, []string{"node0", "node1"}, nil},
		{"paused", func(s *Settings, _ *v1.UpdateChannelStatus, _ []Node) { s.Paused = true }, 0, nil, nil},
		{"outside window", func(s *Settings, _ *v1.UpdateChannelStatus, _ []Node) { s.Window = closed }, 0, nil, nil},
		{"inside window", func(s *Settings, _ *v1.UpdateChannelStatus, _ []Node) { s.Window = open }, 6, nil, nil},
		{"node selector", func(s *Settings, _ *v1.UpdateChannelStatus, _ []Node) {
			s.Selector = labels.SelectorFromSet(labels.Set{"pool": "a"})
		}, 3, []string{"node1", "node3", "node5"}, nil},
		{"slot holders skipped, exact names", func(_ *Settings, st *v1.UpdateChannelStatus, ns []Node) {
			ns[5].Name = "node10"
			st.Updating = []v1.Slot{{Node: "node1"}}
		}, 5, []string{"node1"}, []string{"node10"}},
		{"degraded stops new nodes, retries after backoff", func(_ *Settings, st *v1.UpdateChannelStatus, _ []Node) {
			st.Failed = []v1.Failure{failed("node2", "v2", 1, 2*time.Minute)}
		}, 1, nil, []string{"node2"}},
		{"backoff not elapsed", func(s *Settings, st *v1.UpdateChannelStatus, _ []Node) {
			s.MaxFailures = 5
			st.Failed = []v1.Failure{failed("node2", "v2", 3, 2*time.Minute)}
		}, 5, []string{"node2"}, nil},
		{"failure at an old version does not count", func(_ *Settings, st *v1.UpdateChannelStatus, _ []Node) {
			st.Failed = []v1.Failure{failed("node2", "v1.5", 1, 0)}
		}, 6, nil, []string{"node2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := settings(t, v1.UpdateChannelSpec{Version: "v2"})
			var st v1.UpdateChannelStatus
			ns := nodes(6, "v1")
			tc.edit(&s, &st, ns)
			got := names(Candidates(s, st, ns, "v2", Retry{Base: time.Minute, Max: time.Hour}, now))
			if len(got) != tc.count {
				t.Fatalf("candidates = %v, want %d", got, tc.count)
			}
			set := map[string]bool{}
			for _, g := range got {
				set[g] = true
			}
			for _, n := range tc.skip {
				if set[n] {
					t.Errorf("%s must not be a candidate", n)
				}
			}
			for _, n := range tc.want {
				if !set[n] {
					t.Errorf("%s must be a candidate", n)
				}
			}
		})
	}
}

func TestOrderIsStableAndPerVersion(t *testing.T) {
	a, b := nodes(20, "v1"), nodes(20, "v1")
	b[0], b[19] = b[19], b[0]
	Order(a, "v2")
	Order(b, "v2")
	if !reflect.DeepEqual(names(a), names(b)) {
		t.Fatal("order must not depend on the input order")
	}
	c := nodes(20, "v1")
	Order(c, "v3")
	if reflect.DeepEqual(names(a), names(c)) {
		t.Fatal("order must differ between target versions")
	}
}

func TestClaimNeverExceedsConcurrency(t *testing.T) {
	for _, tc := range []struct {
		concurrency, held, candidates, want int
	}{
		{1, 0, 5, 1}, {3, 1, 5, 2}, {3, 3, 5, 0}, {3, 5, 5, 0}, {10, 0, 4, 4},
	} {
		s := settings(t, v1.UpdateChannelSpec{Concurrency: tc.concurrency})
		var st v1.UpdateChannelStatus
		for i := 0; i < tc.held; i++ {
			st.Updating = append(st.Updating, v1.Slot{Node: fmt.Sprintf("held%d", i)})
		}
		got := Claim(s, &st, nodes(tc.candidates, "v1"), "v2", now)
		if len(got) != tc.want || len(st.Updating) > max(tc.held, tc.concurrency) {
			t.Errorf("concurrency %d held %d: claimed %v, %d slots", tc.concurrency, tc.held, got, len(st.Updating))
		}
	}
}

func TestFailThenClaimCountsAttempts(t *testing.T) {
	s := settings(t, v1.UpdateChannelSpec{Concurrency: 2})
	var st v1.UpdateChannelStatus
	Claim(s, &st, nodes(1, "v1"), "v2", now)
	f := Fail(&st, "node0", "v2", "job failed", now)
	if len(st.Updating) != 0 || f.Attempts != 1 || len(st.Failed) != 1 {
		t.Fatalf("after Fail: %+v", st)
	}
	Claim(s, &st, nodes(1, "v1"), "v2", now)
	if st.Updating[0].Attempt != 2 {
		t.Fatalf("retry attempt = %d, want 2", st.Updating[0].Attempt)
	}
	if f := Fail(&st, "node0", "v2", "again", now); f.Attempts != 2 || len(st.Failed) != 1 {
		t.Fatalf("second failure = %+v", f)
	}
	Claim(s, &st, nodes(1, "v1"), "v2", now)
	Succeed(&st, "node0")
	if len(st.Updating) != 0 || len(st.Failed) != 0 {
		t.Fatalf("after Succeed: %+v", st)
	}
}

func TestReleaseMatchesExactly(t *testing.T) {
	st := v1.UpdateChannelStatus{Updating: []v1.Slot{{Node: "node10"}, {Node: "node1"}}}
	if !Release(&st, "node1") || len(st.Updating) != 1 || st.Updating[0].Node != "node10" {
		t.Fatalf("Release(node1) left %+v", st.Updating)
	}
	if Release(&st, "node") {
		t.Fatal("a prefix must not match")
	}
}

func TestBackoff(t *testing.T) {
	r := Retry{Base: time.Minute, Max: 10 * time.Minute}
	for attempts, want := range map[int]time.Duration{0: 0, 1: time.Minute, 2: 2 * time.Minute, 4: 8 * time.Minute, 5: 10 * time.Minute, 50: 10 * time.Minute} {
		if got := r.Backoff(attempts); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", attempts, got, want)
		}
	}
}

func TestStale(t *testing.T) {
	s := settings(t, v1.UpdateChannelSpec{})
	slot := v1.Slot{Node: "n", Job: "j", Since: metav1.NewTime(now.Add(-time.Minute))}
	ready := SlotNode{Exists: true, Ready: true}
	for _, tc := range []struct {
		name string
		slot v1.Slot
		node SlotNode
		job  SlotJob
		want bool
	}{
		{"healthy", slot, ready, SlotJob{Exists: true}, false},
		{"node deleted", slot, SlotNode{}, SlotJob{}, true},
		{"job failed", slot, ready, SlotJob{Exists: true, Failed: true, Reason: "DeadlineExceeded", FinishedAt: now.Add(-2 * time.Minute)}, true},
		{"job just failed: its agent's turn", slot, ready, SlotJob{Exists: true, Failed: true, FinishedAt: now}, false},
		{"not ready briefly", slot, SlotNode{Exists: true, NotReadyFor: time.Minute}, SlotJob{}, false},
		{"not ready too long", slot, SlotNode{Exists: true, NotReadyFor: 11 * time.Minute}, SlotJob{}, true},
		{"held too long", v1.Slot{Node: "n", Since: metav1.NewTime(now.Add(-2 * time.Hour))}, ready, SlotJob{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := Stale(s, tc.slot, tc.node, tc.job, now)
			if got != tc.want || (got && reason == "") {
				t.Fatalf("Stale = %v %q, want %v", got, reason, tc.want)
			}
		})
	}
}

func TestPruneAndCounts(t *testing.T) {
	ns := nodes(3, "v1")
	ns[0].Version = "v2"
	st := v1.UpdateChannelStatus{
		Updating: []v1.Slot{{Node: "node1"}},
		Failed: []v1.Failure{{Node: "node0", Version: "v2"}, {Node: "node1", Version: "v1.5"},
			{Node: "node2", Version: "v2"}, {Node: "gone", Version: "v2"}},
	}
	Prune(&st, ns, "v2")
	if len(st.Failed) != 1 || st.Failed[0].Node != "node2" {
		t.Fatalf("Prune kept %+v", st.Failed)
	}
	if c := Counts(ns, st, "v2"); c != (v1.NodeCounts{Nodes: 3, UpToDate: 1, Updating: 1, Failed: 1}) {
		t.Fatalf("Counts = %+v", c)
	}
}

func TestConditions(t *testing.T) {
	s := settings(t, v1.UpdateChannelSpec{})
	st := v1.UpdateChannelStatus{Counts: v1.NodeCounts{Nodes: 2, UpToDate: 1, Failed: 1},
		Failed: []v1.Failure{{Node: "n", Version: "v2", Reason: "job failed"}}}
	SetProgress(s, &st, "v2", 3)
	get := func(t string) metav1.Condition {
		for _, c := range st.Conditions {
			if c.Type == t {
				return c
			}
		}
		return metav1.Condition{}
	}
	if c := get(v1.ConditionDegraded); c.Status != metav1.ConditionTrue || c.ObservedGeneration != 3 {
		t.Errorf("Degraded = %+v", c)
	}
	if c := get(v1.ConditionComplete); c.Status != metav1.ConditionFalse {
		t.Errorf("Complete = %+v", c)
	}
	SetInvalid(&st, &Invalid{ReasonBadURL, "x"}, 3)
	if c := get(v1.ConditionInvalid); c.Status != metav1.ConditionTrue || c.Reason != ReasonBadURL {
		t.Errorf("Invalid = %+v", c)
	}
}

func TestSpaceClaims(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name         string
		now, earlier string // "" earlier: no slot before
		want         string
	}{
		{"first slot of the node: the claim time, to the second", "2026-11-26T08:00:00.7Z", "", "2026-11-26T08:00:00Z"},
		{"an earlier second: kept", "2026-11-26T08:00:05.2Z", "2026-11-26T08:00:04Z", "2026-11-26T08:00:05Z"},
		{"the same second as the last slot: the next one", "2026-11-26T08:00:04.9Z", "2026-11-26T08:00:04Z", "2026-11-26T08:00:05Z"},
		{"the last slot was moved ahead already: after it", "2026-11-26T08:00:04.1Z", "2026-11-26T08:00:05Z", "2026-11-26T08:00:06Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := v1.UpdateChannelStatus{Updating: []v1.Slot{{Node: "n1", Version: "v2", Attempt: 1, Since: metav1.NewTime(at(tc.now))},
				{Node: "n2", Version: "v2", Attempt: 1, Since: metav1.NewTime(at(tc.now))}}}
			earlier := map[string]time.Time{}
			if tc.earlier != "" {
				earlier["n1"] = at(tc.earlier)
			}
			SpaceClaims(&st, []string{"n1"}, earlier)
			if got := st.Updating[0].Since.Time; !got.Equal(at(tc.want)) {
				t.Errorf("claim time %s, want %s", got.Format(time.RFC3339Nano), tc.want)
			}
			if got := st.Updating[1].Since.Time; !got.Equal(at(tc.now)) {
				t.Errorf("a slot not just added moved to %s", got.Format(time.RFC3339Nano))
			}
		})
	}
}

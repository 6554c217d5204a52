package plan

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

func TestPrestageLimit(t *testing.T) {
	for _, c := range []struct {
		name        string
		conc        *int
		concurrency int
		nodes       int
		want        int
	}{
		{"unset: a quarter, rounded up", nil, 10, 100, 25},
		{"unset: rounded up", nil, 1, 10, 3},
		{"unset: at least twice the slots", nil, 10, 20, 20},
		{"unset: at least twice the slots, at most every node", nil, 10, 12, 12},
		{"unset: one node stages alone", nil, 1, 1, 1},
		{"unset, no nodes", nil, 1, 0, 0},
		{"set", ptr(7), 10, 100, 7},
		{"0 is off", ptr(0), 1, 100, 0},
	} {
		s := settings(t, v1.UpdateChannelSpec{Concurrency: c.concurrency, Prestage: &v1.PrestageSpec{Concurrency: c.conc}})
		if got := PrestageLimit(s, c.nodes); got != c.want {
			t.Errorf("%s: PrestageLimit = %d, want %d", c.name, got, c.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestPrestageNegativeIsInvalid(t *testing.T) {
	if _, bad := Resolve(v1.UpdateChannelSpec{URL: "file:///m", Prestage: &v1.PrestageSpec{Concurrency: ptr(-2)}}); bad == nil || bad.Reason != ReasonBadConcurrency {
		t.Fatalf("prestage.concurrency -2: %v, want BadConcurrency", bad)
	}
}

func TestGrantStaging(t *testing.T) {
	permit := func(node, version string, ago time.Duration) v1.StagePermit {
		return v1.StagePermit{Node: node, Version: version, Since: metav1.NewTime(now.Add(-ago))}
	}
	fleet := func(edit func([]Node)) []Node {
		ns := nodes(8, "v1")
		if edit != nil {
			edit(ns)
		}
		return ns
	}
	holders := func(st v1.UpdateChannelStatus) []string {
		var out []string
		for _, p := range st.Staging {
			out = append(out, p.Node)
		}
		return out
	}
	order := names(Behind(v1.UpdateChannelStatus{}, nodes(8, "v1"), "v2"))
	for _, c := range []struct {
		name      string
		spec      v1.UpdateChannelSpec
		st        v1.UpdateChannelStatus
		nodes     []Node
		target    string
		wantHeld  []string
		wantAdded int
	}{
		{"twice the one slot of 8 in slot order", v1.UpdateChannelSpec{}, v1.UpdateChannelStatus{}, fleet(nil), "v2", order[:2], 2},
		{"the limit set", v1.UpdateChannelSpec{Prestage: &v1.PrestageSpec{Concurrency: ptr(3)}}, v1.UpdateChannelStatus{}, fleet(nil), "v2", order[:3], 3},
		{"off: no permits, the held ones taken back", v1.UpdateChannelSpec{Prestage: &v1.PrestageSpec{Concurrency: ptr(0)}},
			v1.UpdateChannelStatus{Staging: []v1.StagePermit{permit(order[0], "v2", 0)}}, fleet(nil), "v2", nil, 0},
		{"no target: none", v1.UpdateChannelSpec{}, v1.UpdateChannelStatus{}, fleet(nil), "", nil, 0},
		{"paused: none new", v1.UpdateChannelSpec{Paused: true}, v1.UpdateChannelStatus{}, fleet(nil), "v2", nil, 0},
		{"a permit for an old target is taken back and given anew", v1.UpdateChannelSpec{},
			v1.UpdateChannelStatus{Staging: []v1.StagePermit{permit(order[5], "v3", 0)}}, fleet(nil), "v2", order[:2], 2},
		{"held permits count", v1.UpdateChannelSpec{},
			v1.UpdateChannelStatus{Staging: []v1.StagePermit{permit(order[5], "v2", time.Minute)}}, fleet(nil), "v2", []string{order[5], order[0]}, 1},
		{"a permit silent past the Job's deadline is taken back", v1.UpdateChannelSpec{},
			v1.UpdateChannelStatus{Staging: []v1.StagePermit{permit(order[5], "v2", time.Hour)}}, fleet(nil), "v2", order[:2], 2},
		{"staged, failed, up to date and unknown nodes get none", v1.UpdateChannelSpec{}, v1.UpdateChannelStatus{}, fleet(func(ns []Node) {
			for i := range ns {
				switch ns[i].Name {
				case order[0]:
					ns[i].Prestaged = "v2"
				case order[1]:
					ns[i].PrestageFailed = "v2"
				case order[2]:
					ns[i].Version = "v2"
				case order[3]:
					ns[i].Version = ""
				case order[4]:
					ns[i].StagingDone = true // gave its permit back since the list
				}
			}
		}), "v2", order[5:7], 2},
		{"a done node's permit is taken back", v1.UpdateChannelSpec{},
			v1.UpdateChannelStatus{Staging: []v1.StagePermit{permit(order[0], "v2", 0)}}, fleet(func(ns []Node) {
				for i := range ns {
					if ns[i].Name == order[0] {
						ns[i].Prestaged = "v2"
					}
				}
			}), "v2", order[1:3], 2},
		{"slot holders and skipped nodes get none", v1.UpdateChannelSpec{}, v1.UpdateChannelStatus{
			Updating: []v1.Slot{{Node: order[0], Version: "v2"}}, Skipped: []v1.SkippedNode{{Node: order[1], Reason: SkipNotReady}},
		}, fleet(nil), "v2", order[2:4], 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := settings(t, c.spec)
			st := c.st
			added := GrantStaging(s, &st, c.nodes, c.target, now)
			if got := holders(st); !reflect.DeepEqual(got, c.wantHeld) {
				t.Errorf("permits held by %v, want %v", got, c.wantHeld)
			}
			if len(added) != c.wantAdded {
				t.Errorf("added %v, want %d", added, c.wantAdded)
			}
			for _, p := range st.Staging {
				if p.Version != c.target {
					t.Errorf("permit %+v is not for the target %s", p, c.target)
				}
			}
		})
	}
}

func TestCountsStaged(t *testing.T) {
	ns := nodes(4, "v1")
	ns[0].Prestaged, ns[1].Prestaged, ns[2].Version, ns[2].Prestaged = "v2", "v3", "v2", "v2"
	if c := Counts(ns, v1.UpdateChannelStatus{}, "v2"); c.Staged != 1 || c.UpToDate != 1 {
		t.Fatalf("Counts = %+v, want 1 staged (a staged release that runs is up to date, another version is not staged)", c)
	}
}

// stageObserved is a node at v1 holding a permit to stage v2, edited.
func stageObserved(edit func(*StageObserved)) StageObserved {
	o := StageObserved{Target: "v2", Running: "v1", Permit: true}
	edit(&o)
	return o
}

func TestNextStage(t *testing.T) {
	for _, c := range []struct {
		name string
		o    StageObserved
		want StageStep
	}{
		{"permit, nothing staged: stage", stageObserved(func(*StageObserved) {}), StageCreate},
		{"no permit: wait", stageObserved(func(o *StageObserved) { o.Permit = false }), StageWait},
		{"a Job writes the system directory: wait", stageObserved(func(o *StageObserved) { o.Busy = true }), StageWait},
		{"the slot's Job owns the directory: wait", stageObserved(func(o *StageObserved) { o.InSlot, o.OnDisk = true, []string{"v3"} }), StageWait},
		{"staged, not reported: publish", stageObserved(func(o *StageObserved) { o.OnDisk = []string{"v2"} }), StagePublish},
		{"staged and reported: release", stageObserved(func(o *StageObserved) { o.OnDisk, o.Published = []string{"v2"}, "v2" }), StageRelease},
		{"staged and reported, no permit: wait", stageObserved(func(o *StageObserved) { o.OnDisk, o.Published, o.Permit = []string{"v2"}, "v2", false }), StageWait},
		{"failed once: stage again", stageObserved(func(o *StageObserved) { o.Failures = 1 }), StageCreate},
		{"failed twice: report it", stageObserved(func(o *StageObserved) { o.Failures = MaxStageAttempts }), StagePublish},
		{"failed twice and reported: release", stageObserved(func(o *StageObserved) { o.Failures, o.PublishedFailed = MaxStageAttempts, "v2" }), StageRelease},
		{"a stale stage (the target changed): prune", stageObserved(func(o *StageObserved) { o.OnDisk = []string{"v2", "v3"} }), StagePrune},
		{"a stale stage without a permit: prune", stageObserved(func(o *StageObserved) { o.OnDisk, o.Permit = []string{"v3"}, false }), StagePrune},
		{"no target: prune what is staged", stageObserved(func(o *StageObserved) { o.Target, o.Permit, o.OnDisk = "", false, []string{"v2"} }), StagePrune},
		{"a stale report: clear it", stageObserved(func(o *StageObserved) { o.Permit, o.Published = false, "v3" }), StagePublish},
		{"a report of the release that runs now: clear it", stageObserved(func(o *StageObserved) { o.Running, o.Permit, o.Published = "v2", false, "v2" }), StagePublish},
		{"in the slot, reported, permit held: release", stageObserved(func(o *StageObserved) { o.InSlot, o.Published = true, "v2" }), StageRelease},
		{"runs the target with a permit: release", stageObserved(func(o *StageObserved) { o.Running = "v2" }), StageRelease},
	} {
		got, why := NextStage(c.o)
		if got != c.want || why == "" {
			t.Errorf("%s: NextStage = %s (%q), want %s", c.name, got, why, c.want)
		}
	}
}

func TestPublishEndsStaging(t *testing.T) {
	for _, c := range []struct {
		name string
		o    StageObserved
		want bool
	}{
		{"staged under the permit: the permit goes back with the publish", stageObserved(func(o *StageObserved) { o.OnDisk = []string{"v2"} }), true},
		{"gave up under the permit: back with the publish", stageObserved(func(o *StageObserved) { o.Failures = MaxStageAttempts }), true},
		{"staged, no permit held: the publish alone", stageObserved(func(o *StageObserved) { o.OnDisk, o.Permit = []string{"v2"}, false }), false},
		{"a stale report cleared: the publish alone", stageObserved(func(o *StageObserved) { o.Permit, o.Published = false, "v3" }), false},
		{"nothing staged yet, a stale report cleared under the permit: staging goes on", stageObserved(func(o *StageObserved) { o.Published = "v3" }), false},
		{"no target: the publish alone", stageObserved(func(o *StageObserved) { o.Target, o.Permit, o.Published = "", false, "v2" }), false},
	} {
		if got := PublishEndsStaging(c.o); got != c.want {
			t.Errorf("%s: PublishEndsStaging = %v, want %v", c.name, got, c.want)
		}
	}
}

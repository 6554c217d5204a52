package plan

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/analysis"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

func TestStepBackout(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	server := map[string]string{"node-role.kubernetes.io/control-plane": "true"}
	nodes := func(ns ...Node) map[string]Node {
		out := map[string]Node{}
		for _, n := range ns {
			out[n.Name] = n
		}
		return out
	}
	at := func(name, version string) Node { return Node{Name: name, Version: version} }
	failedWave := func(wave ...string) *v1.AnalysisStatus {
		as := &v1.AnalysisStatus{Wave: wave, WaveVersion: "v2", Failed: &v1.AnalysisFailure{Query: "error-rate", Nodes: wave, Version: "v2"}}
		for _, n := range wave {
			as.Previous = append(as.Previous, v1.NodeVersion{Node: n, Version: "v1"})
		}
		return as
	}
	running := func(as *v1.AnalysisStatus, states ...string) *v1.AnalysisStatus {
		as.Rollback = &v1.WaveRollback{Version: "v2", State: WaveRollingBack}
		for i, n := range as.Failed.Nodes {
			as.Rollback.Nodes = append(as.Rollback.Nodes, v1.NodeRollback{Node: n, From: "v2", To: "v1", State: states[i]})
		}
		return as
	}
	rbSlot := func(node string) v1.Slot {
		return v1.Slot{Node: node, Version: "v1", From: "v2", Rollback: true, Attempt: 1, Phase: PhaseRebooting}
	}
	cases := []struct {
		name        string
		rollback    bool // spec.analysis.onFailure rollback
		concurrency int
		paused      bool
		as          *v1.AnalysisStatus
		slots       []v1.Slot
		pass        BackoutPass
		// want: the rollback slots held after the pass, each node's state, and the step.
		wantSlots  []string
		wantStates []string
		wantState  string
		started    bool
		finished   bool
		wantEnded  []string
		wait       string
	}{
		{name: "halt only: nothing rolls back", concurrency: 1, as: failedWave("n1"),
			pass: BackoutPass{Nodes: nodes(at("n1", "v2"))}},
		{name: "no failure: nothing", rollback: true, concurrency: 1, as: &v1.AnalysisStatus{Wave: []string{"n1"}},
			pass: BackoutPass{Nodes: nodes(at("n1", "v2"))}},
		{name: "starts: the wave's first node within concurrency 1", rollback: true, concurrency: 1, as: failedWave("n1", "n2"),
			pass:      BackoutPass{Nodes: nodes(at("n1", "v2"), at("n2", "v2"), at("n3", "v1"))},
			wantSlots: []string{"n1"}, wantStates: []string{NodeRollbackRunning, NodeRollbackPending}, wantState: WaveRollingBack, started: true,
			wait: "every slot is held (concurrency 1)"},
		{name: "concurrency 2: both at once", rollback: true, concurrency: 2, as: failedWave("n1", "n2"),
			pass:      BackoutPass{Nodes: nodes(at("n1", "v2"), at("n2", "v2"))},
			wantSlots: []string{"n1", "n2"}, wantStates: []string{NodeRollbackRunning, NodeRollbackRunning}, wantState: WaveRollingBack, started: true},
		{name: "a slot held by another node counts", rollback: true, concurrency: 2, as: failedWave("n1", "n2"),
			slots:     []v1.Slot{{Node: "n9", Version: "v2", Phase: PhaseRebooting}},
			pass:      BackoutPass{Nodes: nodes(at("n1", "v2"), at("n2", "v2"), at("n9", "v1"))},
			wantSlots: []string{"n1"}, wantStates: []string{NodeRollbackRunning, NodeRollbackPending}, wantState: WaveRollingBack, started: true,
			wait: "every slot is held (concurrency 2)"},
		{name: "a node down spends concurrency and waits", rollback: true, concurrency: 2, as: failedWave("n1", "n2"),
			pass:      BackoutPass{Nodes: nodes(at("n1", "v2"), at("n2", "v2")), Down: []string{"n1"}},
			wantSlots: []string{"n2"}, wantStates: []string{NodeRollbackPending, NodeRollbackRunning}, wantState: WaveRollingBack, started: true,
			wait: "node n1 is down"},
		{name: "previous version unknown: reported at once, the others go on", rollback: true, concurrency: 1,
			as:        func() *v1.AnalysisStatus { as := failedWave("n1", "n2"); as.Previous = as.Previous[1:]; return as }(),
			pass:      BackoutPass{Nodes: nodes(at("n1", "v2"), at("n2", "v2"))},
			wantSlots: []string{"n2"}, wantStates: []string{NodeRollbackFailed, NodeRollbackRunning}, wantState: WaveRollingBack, started: true,
			wantEnded: []string{"n1"}},
		{name: "one server at a time", rollback: true, concurrency: 3, as: failedWave("s1", "s2", "n1"),
			pass:      BackoutPass{Nodes: nodes(Node{Name: "s1", Version: "v2", Labels: server}, Node{Name: "s2", Version: "v2", Labels: server}, at("n1", "v2"))},
			wantSlots: []string{"s1", "n1"}, wantStates: []string{NodeRollbackRunning, NodeRollbackPending, NodeRollbackRunning}, wantState: WaveRollingBack,
			started: true, wait: "one server at a time"},
		{name: "a server of another channel holds a slot", rollback: true, concurrency: 2, as: failedWave("s1", "n1"),
			pass:      BackoutPass{Nodes: nodes(Node{Name: "s1", Version: "v2", Labels: server}, at("n1", "v2")), ServerElsewhere: true},
			wantSlots: []string{"n1"}, wantStates: []string{NodeRollbackPending, NodeRollbackRunning}, wantState: WaveRollingBack, started: true,
			wait: "one server at a time"},
		{name: "paused: nothing starts", rollback: true, concurrency: 1, paused: true, as: failedWave("n1"),
			pass:       BackoutPass{Nodes: nodes(at("n1", "v2"))},
			wantStates: []string{NodeRollbackPending}, wantState: WaveRollingBack, started: true, wait: "paused"},
		{name: "back already: rolled back without a slot", rollback: true, concurrency: 1, as: failedWave("n1"),
			pass:       BackoutPass{Nodes: nodes(at("n1", "v1"))},
			wantStates: []string{NodeRollbackDone}, wantState: WaveRolledBack, started: true, finished: true, wantEnded: []string{"n1"}},
		{name: "a node gone is reported", rollback: true, concurrency: 1, as: failedWave("n1"),
			pass:       BackoutPass{Nodes: nodes()},
			wantStates: []string{NodeRollbackFailed}, wantState: WaveRolledBack, started: true, finished: true, wantEnded: []string{"n1"}},
		{name: "succeeded: the next node takes the slot", rollback: true, concurrency: 1,
			as:        running(failedWave("n1", "n2"), NodeRollbackRunning, NodeRollbackPending),
			pass:      BackoutPass{Nodes: nodes(at("n1", "v1"), at("n2", "v2")), Succeeded: []string{"n1"}},
			wantSlots: []string{"n2"}, wantStates: []string{NodeRollbackDone, NodeRollbackRunning}, wantState: WaveRollingBack, wantEnded: []string{"n1"}},
		{name: "the last one fails: finished, reported", rollback: true, concurrency: 1,
			as:         running(failedWave("n1", "n2"), NodeRollbackDone, NodeRollbackRunning),
			pass:       BackoutPass{Nodes: nodes(at("n1", "v1"), at("n2", "v2")), Failed: map[string]string{"n2": "rollback job failed"}},
			wantStates: []string{NodeRollbackDone, NodeRollbackFailed}, wantState: WaveRolledBack, finished: true, wantEnded: []string{"n2"}},
		{name: "still in its slot: waits", rollback: true, concurrency: 1,
			as:        running(failedWave("n1", "n2"), NodeRollbackRunning, NodeRollbackPending),
			slots:     []v1.Slot{rbSlot("n1")},
			pass:      BackoutPass{Nodes: nodes(at("n1", "v2"), at("n2", "v2"))},
			wantSlots: []string{"n1"}, wantStates: []string{NodeRollbackRunning, NodeRollbackPending}, wantState: WaveRollingBack,
			wait: "every slot is held"},
		{name: "given back (the window): pending again, granted again", rollback: true, concurrency: 1,
			as:        running(failedWave("n1"), NodeRollbackRunning),
			pass:      BackoutPass{Nodes: nodes(at("n1", "v2")), Released: []string{"n1"}},
			wantSlots: []string{"n1"}, wantStates: []string{NodeRollbackRunning}, wantState: WaveRollingBack},
		{name: "its slot vanished without a result: reported", rollback: true, concurrency: 1,
			as:         running(failedWave("n1"), NodeRollbackRunning),
			pass:       BackoutPass{Nodes: nodes(at("n1", "v2"))},
			wantStates: []string{NodeRollbackFailed}, wantState: WaveRolledBack, finished: true, wantEnded: []string{"n1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Settings{Concurrency: c.concurrency, Paused: c.paused}
			a := &Analysis{Rollback: c.rollback, Interval: time.Second}
			st := &v1.UpdateChannelStatus{Analysis: c.as, Updating: slices.Clone(c.slots)}
			step := StepBackout(s, a, st, c.pass, now)
			var held []string
			for _, sl := range st.Updating {
				if sl.Rollback {
					held = append(held, sl.Node)
					if sl.Version != "v1" || sl.From != "v2" || sl.Attempt != 1 {
						t.Errorf("rollback slot %+v, want v2 to v1, attempt 1", sl)
					}
				}
			}
			if !slices.Equal(held, c.wantSlots) {
				t.Errorf("rollback slots %v, want %v", held, c.wantSlots)
			}
			if len(st.Updating) > max(c.concurrency, len(c.slots)) {
				t.Errorf("%d slots held, more than concurrency %d", len(st.Updating), c.concurrency)
			}
			rb := st.Analysis.Rollback
			if c.wantStates == nil {
				if rb != nil || step.Started {
					t.Errorf("a rollback %+v began", rb)
				}
				return
			}
			var states []string
			for _, nr := range rb.Nodes {
				states = append(states, nr.State)
			}
			if !slices.Equal(states, c.wantStates) || rb.State != c.wantState {
				t.Errorf("states %v (wave %s), want %v (%s): %+v", states, rb.State, c.wantStates, c.wantState, rb.Nodes)
			}
			if step.Started != c.started || step.Finished != c.finished || (rb.Finished != nil) != (c.wantState != WaveRollingBack) {
				t.Errorf("started %t finished %t (at %v), want %t %t", step.Started, step.Finished, rb.Finished, c.started, c.finished)
			}
			var ended []string
			for _, e := range step.Ended {
				ended = append(ended, e.Node)
			}
			if !slices.Equal(ended, c.wantEnded) {
				t.Errorf("ended %v, want %v", ended, c.wantEnded)
			}
			if !strings.Contains(step.Wait, c.wait) || (c.wait == "") != (step.Wait == "") {
				t.Errorf("wait %q, want %q", step.Wait, c.wait)
			}
			for _, nr := range rb.Nodes {
				if nr.State == NodeRollbackFailed && nr.Message == "" {
					t.Errorf("node %s failed with no message", nr.Node)
				}
			}
		})
	}
}

// The nodes joining a wave record what they ran before, from their slot.
func TestNotePrevious(t *testing.T) {
	st := &v1.UpdateChannelStatus{Analysis: &v1.AnalysisStatus{Previous: []v1.NodeVersion{{Node: "n1", Version: "v0"}}}}
	NotePrevious(st, []v1.Slot{{Node: "n1", Version: "v2", From: "v1"}, {Node: "n2", Version: "v2", From: "v1"}, {Node: "n3", Version: "v2"}},
		[]string{"n1", "n3"})
	if want := []v1.NodeVersion{{Node: "n1", Version: "v1"}}; !slices.Equal(st.Analysis.Previous, want) {
		t.Errorf("previous %v, want %v", st.Analysis.Previous, want)
	}
}

// After the rollback the analysis is asked once the bake (at least an
// interval) passed, each interval until it passes; a pass says Cured.
func TestRollbackJudgement(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	a := &Analysis{Rollback: true, Bake: 5 * time.Second, Interval: time.Second}
	as := &v1.AnalysisStatus{Failed: &v1.AnalysisFailure{Version: "v2"}, Rollback: &v1.WaveRollback{Version: "v2", State: WaveRollingBack}}
	if RollbackJudgeDue(a, as, now) || RollbackNext(a, as, now) != 0 {
		t.Fatal("judged before the rollback finished")
	}
	as.Rollback.State, as.Rollback.Finished = WaveRolledBack, &metav1.Time{Time: now}
	if RollbackJudgeDue(a, as, now.Add(4*time.Second)) {
		t.Error("judged within the bake")
	}
	if d := RollbackNext(a, as, now); d != 5*time.Second {
		t.Errorf("next pass in %s, want the bake's end", d)
	}
	if !RollbackJudgeDue(a, as, now.Add(5*time.Second)) {
		t.Error("not judged at the bake's end")
	}
	JudgeRollback(as, analysis.Result{Verdict: analysis.Fail}, now.Add(5*time.Second))
	if as.Rollback.State != WaveNotCured || RollbackJudgeDue(a, as, now.Add(5500*time.Millisecond)) || !RollbackJudgeDue(a, as, now.Add(6*time.Second)) {
		t.Errorf("after a failure: %+v", as.Rollback)
	}
	JudgeRollback(as, analysis.Result{Verdict: analysis.Hold}, now.Add(6*time.Second))
	if as.Rollback.State != WaveNotCured || as.Rollback.Verdict != "Hold" {
		t.Errorf("a hold changed the state: %+v", as.Rollback)
	}
	JudgeRollback(as, analysis.Result{Verdict: analysis.Pass}, now.Add(7*time.Second))
	if as.Rollback.State != WaveCured || RollbackJudgeDue(a, as, now.Add(time.Hour)) || RollbackNext(a, as, now) != 0 {
		t.Errorf("after a pass: %+v", as.Rollback)
	}
	if as.Failed == nil {
		t.Error("the halt was lifted by the rollback's judgement")
	}
}

// A new resume token lifts the halt once; the same token again does nothing.
func TestResume(t *testing.T) {
	failed := func() *v1.UpdateChannelStatus {
		return &v1.UpdateChannelStatus{Analysis: &v1.AnalysisStatus{Wave: []string{"n1"}, Failed: &v1.AnalysisFailure{Version: "v2"},
			Rollback: &v1.WaveRollback{Version: "v2"}}}
	}
	st := failed()
	if Resume(st, "") || st.Analysis.Failed == nil {
		t.Fatal("an empty token resumed")
	}
	if !Resume(st, "t1") || st.Analysis.Failed != nil || st.Analysis.Rollback != nil || len(st.Analysis.Wave) != 0 || st.Analysis.Resumed != "t1" {
		t.Fatalf("t1 did not lift the halt: %+v", st.Analysis)
	}
	st.Analysis.Failed = &v1.AnalysisFailure{Version: "v2"} // a later failure
	if Resume(st, "t1") || st.Analysis.Failed == nil {
		t.Error("the token already acted on lifted a later halt")
	}
	if !Resume(st, "t2") || st.Analysis.Failed != nil {
		t.Error("a new token did not lift it")
	}
	st = &v1.UpdateChannelStatus{}
	if Resume(st, "t3") || st.Analysis.Resumed != "t3" {
		t.Errorf("a token with no halt: %+v (want it recorded, acting on nothing)", st.Analysis)
	}
	// A new release keeps the token acted on.
	st = failed()
	st.Analysis.Resumed = "t4"
	StepAnalysis(&Analysis{Interval: time.Second}, st, nil, "v3", nil, time.Now(), 1)
	if st.Analysis.Resumed != "t4" || st.Analysis.Failed != nil {
		t.Errorf("after a new target: %+v", st.Analysis)
	}
}

package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestEndedOnlyMemoAnswersOnlyTheSameQuestion: the memo's answer is used
// only when the view held, the view wanted and the node's reports are the
// ones it was given for; any of them changed, the decision is made again.
func TestEndedOnlyMemoAnswersOnlyTheSameQuestion(t *testing.T) {
	var m viewMemo
	calls := 0
	ask := func(node string, uid types.UID, cur, want, report string, answer bool) bool {
		return m.endedOnly(node, uid, cur, want, report, func() bool { calls++; return answer })
	}
	steps := []struct {
		name              string
		node              string
		uid               types.UID
		cur, want, report string
		answer, expect    bool
		decided           bool
	}{
		{"first asked", "n1", "u1", "held", "wanted", "r1", true, true, true},
		{"asked again", "n1", "u1", "held", "wanted", "r1", false, true, false},
		{"another report", "n1", "u1", "held", "wanted", "r2", false, false, true},
		{"another view held", "n1", "u1", "held2", "wanted", "r2", true, true, true},
		{"another view wanted", "n1", "u1", "held2", "wanted2", "r2", false, false, true},
		{"another channel", "n1", "u2", "held2", "wanted2", "r2", true, true, true},
		{"another node", "n2", "u1", "held2", "wanted2", "r2", true, true, true},
		{"the first node's again", "n1", "u1", "held2", "wanted2", "r2", true, false, false},
	}
	for _, s := range steps {
		before := calls
		if got := ask(s.node, s.uid, s.cur, s.want, s.report, s.answer); got != s.expect {
			t.Errorf("%s: answered %v, want %v", s.name, got, s.expect)
		}
		if decided := calls > before; decided != s.decided {
			t.Errorf("%s: decided anew %v, want %v", s.name, decided, s.decided)
		}
	}
}

// TestObjectViewsMemoFollowsTheObjectAndTheSpecWritten: the views are
// built again when the NodeUpdate's resource version or the spec laid over
// it changes, and after the node is forgotten.
func TestObjectViewsMemoFollowsTheObjectAndTheSpecWritten(t *testing.T) {
	var m viewMemo
	built := 0
	get := func(rv, specRV string) string {
		return m.objectViews("n1", rv, specRV, func() map[string]string {
			built++
			return map[string]string{"k": rv + "/" + specRV}
		})["k"]
	}
	steps := []struct {
		rv, specRV string
		want       string
		builds     bool
	}{
		{"10", "10", "10/10", true},
		{"10", "10", "10/10", false},
		{"10", "12", "10/12", true}, // the controller's write, not in the cache yet
		{"10", "12", "10/12", false},
		{"11", "12", "11/12", true}, // the agent's status write, older than the controller's: its report changed
		{"13", "13", "13/13", true},
	}
	for i, s := range steps {
		before := built
		if got := get(s.rv, s.specRV); got != s.want {
			t.Errorf("step %d: views of %q, want %q", i, got, s.want)
		}
		if b := built > before; b != s.builds {
			t.Errorf("step %d: built anew %v, want %v", i, b, s.builds)
		}
	}
	m.forget("n1")
	before := built
	get("13", "13")
	if built == before {
		t.Error("the views of a forgotten node came from the memo")
	}
}

// TestReportsMemoFollowsTheNodeAndItsNodeUpdate: a node's metadata with
// its NodeUpdate's reports is made again when either object changes.
func TestReportsMemoFollowsTheNodeAndItsNodeUpdate(t *testing.T) {
	var m viewMemo
	built := 0
	get := func(nodeRV, updateRV string) string {
		return m.withReports("n1", nodeRV, updateRV, func() *metav1.ObjectMeta {
			built++
			return &metav1.ObjectMeta{Name: nodeRV + "/" + updateRV}
		}).Name
	}
	for i, s := range []struct {
		nodeRV, updateRV, want string
		builds                 bool
	}{
		{"5", "7", "5/7", true},
		{"5", "7", "5/7", false},
		{"5", "9", "5/9", true}, // the agent's report
		{"8", "9", "8/9", true}, // the Node (the controller's cordon)
		{"8", "9", "8/9", false},
	} {
		before := built
		if got := get(s.nodeRV, s.updateRV); got != s.want {
			t.Errorf("step %d: metadata of %q, want %q", i, got, s.want)
		}
		if b := built > before; b != s.builds {
			t.Errorf("step %d: built anew %v, want %v", i, b, s.builds)
		}
	}
}

// TestMemoForgetsDeletedNodesAndChannels: a deleted node's entries and a
// deleted channel's answers go; the others stay.
func TestMemoForgetsDeletedNodesAndChannels(t *testing.T) {
	var m viewMemo
	for _, at := range []endedAt{{"n1", "u1"}, {"n1", "u2"}, {"n2", "u1"}, {"n2", "u2"}} {
		m.endedOnly(at.node, at.uid, "held", "wanted", "r", func() bool { return true })
	}
	m.objectViews("n1", "1", "1", func() map[string]string { return nil })
	m.withReports("n1", "1", "1", func() *metav1.ObjectMeta { return nil })
	m.objectViews("n2", "1", "1", func() map[string]string { return nil })
	m.forget("n1")
	m.forgetChannel("u2")
	if _, ok := m.ended[endedAt{"n2", "u1"}]; !ok || len(m.ended) != 1 {
		t.Errorf("answers left %v, want n2's of u1 alone", m.ended)
	}
	if _, ok := m.objects["n2"]; !ok || len(m.objects) != 1 || len(m.reports) != 0 {
		t.Errorf("views left of %d nodes (n2's kept: %v), reports of %d; want n2's views alone", len(m.objects), ok, len(m.reports))
	}
}

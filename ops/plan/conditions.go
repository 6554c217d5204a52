package plan

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// SetInvalid records a spec that cannot be acted on (bad == nil clears it).
// It reports whether the conditions changed.
func SetInvalid(st *v1.UpdateChannelStatus, bad *Invalid, generation int64) bool {
	c := metav1.Condition{Type: v1.ConditionInvalid, Status: metav1.ConditionFalse, Reason: "Valid",
		Message: "the spec is valid", ObservedGeneration: generation}
	if bad != nil {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, bad.Reason, bad.Message
	}
	return meta.SetStatusCondition(&st.Conditions, c)
}

// SetProgress sets the Progressing, Complete and Degraded conditions from
// the counts and failures. It reports whether they changed.
func SetProgress(s Settings, st *v1.UpdateChannelStatus, target string, generation int64) bool {
	cond := func(t string, ok bool, reason, msg string) bool {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		return meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: status,
			Reason: reason, Message: msg, ObservedGeneration: generation})
	}
	c := st.Counts
	complete := target != "" && c.UpToDate == c.Nodes
	msg := fmt.Sprintf("%d of %d nodes run %s", c.UpToDate, c.Nodes, orNone(target))
	if c.Skipped > 0 {
		msg += fmt.Sprintf("; %d skipped (status.skipped says why)", c.Skipped)
	}
	changed := cond(v1.ConditionComplete, complete, pick(complete, "AllUpToDate", "NodesBehind"), msg)
	progressing := len(st.Updating) > 0 || (!complete && target != "")
	reason := "Idle"
	switch {
	case len(st.Updating) > 0:
		reason = "Upgrading"
	case progressing && s.Paused:
		reason = "Paused"
	case progressing:
		reason = "Waiting"
	}
	// The message names no phases: a node's own phase writes must not make
	// the fleet view write the status again.
	changed = cond(v1.ConditionProgressing, progressing, reason,
		fmt.Sprintf("%d nodes hold a slot (concurrency %d), %d of %d run %s", len(st.Updating), s.Concurrency, c.UpToDate, c.Nodes, orNone(target))) || changed
	degraded := target != "" && Degraded(s, *st, target)
	msg = fmt.Sprintf("%d nodes failed to reach %s (maxFailures %d)", failuresAt(*st, target), orNone(target), s.MaxFailures)
	if degraded {
		msg += "; no new node starts until they succeed or are fixed: " + failureReasons(*st, target)
	}
	return cond(v1.ConditionDegraded, degraded, pick(degraded, "TooManyFailures", "AsExpected"), msg) || changed
}

func failureReasons(st v1.UpdateChannelStatus, target string) string {
	var out []string
	skipped := skippedSet(st)
	for _, f := range st.Failed {
		if f.Version == target && !skipped[f.Node] {
			out = append(out, f.Node+": "+f.Reason)
		}
	}
	return strings.Join(out, "; ")
}

func pick(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

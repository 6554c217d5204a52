package chaos

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/monitor"
)

// A cordon that raced a down. The cordon rules (cordon-within-budget,
// cordon-control-plane-alone) judge the cordon as the monitor saw it,
// against every node down at that instant. A controller decides before it
// writes: its last live read precedes its cordon request by one round
// trip at least, and a node that goes down by a fault within that span
// (the down committed after the read began) was one no read could show it.
// The product states that limit (the server step's comment) and checks
// again before the reboot. Such a cordon is excused from the API server's
// audit log, never by a time window. The judgement is as tight as the log
// allows, not exact: a read is known to have been served by its answer,
// and a down's write to have committed by the earlier of its answer and
// the monitor's sight of it, no earlier than its receipt. Taking the
// latest instant of the commit, a cordon whose read was answered within
// the down write's own span (its receipt to its commit, tens of ms) is
// excused although that read might have shown the down.
//
// The judgement (raceExcuse) takes, for the cordoned node:
//   - the cordon's request: the last write to the Node (not its status)
//     by a service account (slipway's components; the harness writes as
//     admin) received before the monitor saw the cordon;
//   - what the decision could have seen: the same client's last get or
//     list of nodes or updatechannels received before the cordon's request
//     (testenv.Options.AuditGets keeps them), when the client wrote nothing between
//     that read and the cordon (else the read fed an earlier step, or the
//     client decided from its caches: its Lease renewals, Events and status
//     writes fall between), taken at its answer; with no such read, the
//     cordon's request itself.
//
// And, for each node the violation names as spending the budget:
//   - it must be named NotReady alone (a cordon is slipway's own);
//   - its down is the last spell of its history (the monitor's versions)
//     that was not Ready, up to the cordon: the version that began it,
//     seen at some instant, and the first write to the Node's status (or
//     its delete or create) received from the start of the fault that was
//     holding it then, at or before that instant;
//   - a fault must have held it then: a NotReady or Reregister fault of
//     the schedule, a power cut or an injected reboot that struck (their
//     spans as Excused and excusedReboot take them);
//   - it raced when its down committed after what the decision could have
//     seen was answered: the commit is taken at the earlier of that
//     write's answer and the monitor's sight of it.
//
// The cordon is excused when the nodes that did not race are fewer than
// the budget (concurrency; one for the control-plane rule). Anything not
// found (no cordon request, no history of the down, no fault, no write)
// excuses nothing. What stays lenient is the round trip itself: a down
// that committed between the last live read and the cordon's request is
// excused even when the controller also consults a watch cache (the
// channel's budget) that may have received it in between; that is the
// instant the product says no read closes.

// downSpan is a span in which an unplanned fault held a node down.
type downSpan struct {
	node     string
	what     string
	from, to time.Time
}

// faultDowns are the spans of sched (offsets from start) and strikes that
// take a node down: NotReady and Reregister faults, power cuts and
// injected reboots that struck, each until it ended plus faultGrace.
func faultDowns(sched faults.Schedule, strikes []faults.Strike, start time.Time) []downSpan {
	var out []downSpan
	for _, f := range sched {
		if f.Kind == faults.NotReady || f.Kind == faults.Reregister {
			out = append(out, downSpan{strings.TrimPrefix(f.Target, "node/"), string(f.Kind), start.Add(f.At), start.Add(f.At + f.For + faultGrace)})
		}
	}
	for _, s := range strikes {
		if s.Kind == faults.PowerCut || s.Kind == faults.Reboot {
			out = append(out, downSpan{s.Node, string(s.Kind), s.At, s.Back.Add(faultGrace)})
		}
	}
	return out
}

// spentRE is one "name (why)" of a cordon rule's message.
var spentRE = regexp.MustCompile(`([^\s;]+) \(([^)]*)\)`)

// concurrencyRE is cordon-within-budget's budget in its message.
var concurrencyRE = regexp.MustCompile(`concurrency (\d+): `)

// spenders are the nodes a cordon rule's message names unavailable, with
// why, and the budget they spent.
func spenders(v monitor.Violation) (names, whys []string, budget int, err error) {
	i := strings.LastIndex(v.Message, ": ")
	if i < 0 {
		return nil, nil, 0, fmt.Errorf("no unavailable nodes in %q", v.Message)
	}
	for _, m := range spentRE.FindAllStringSubmatch(v.Message[i+2:], -1) {
		names, whys = append(names, m[1]), append(whys, m[2])
	}
	budget = 1 // cordon-control-plane-alone: no other server down
	if v.Invariant == monitor.InvCordonBudget {
		m := concurrencyRE.FindStringSubmatch(v.Message)
		if m == nil {
			return nil, nil, 0, fmt.Errorf("no concurrency in %q", v.Message)
		}
		budget, _ = strconv.Atoi(m[1])
	}
	if len(names) == 0 {
		return nil, nil, 0, fmt.Errorf("no unavailable nodes in %q", v.Message)
	}
	return names, whys, budget, nil
}

// cordonSeen is the node and the instant of a cordon rule's key
// ("node@RFC3339Nano"; v.At when the key holds no instant).
func cordonSeen(v monitor.Violation) (string, time.Time) {
	node, at, _ := strings.Cut(v.Key, "@")
	if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
		return node, t
	}
	return node, v.At
}

// downBegan is when the monitor saw node's last spell not Ready up to
// seen begin (its history in v): false when the history holds no Ready
// version before it, or the node is Ready at seen.
func downBegan(v monitor.Violation, node string, seen time.Time) (time.Time, bool) {
	hist := v.History["Node//"+node]
	last := -1
	for i, h := range hist {
		if !h.At.After(seen) {
			last = i
		}
	}
	if last < 0 || strings.Contains(hist[last].Summary, "ready=true") {
		return time.Time{}, false
	}
	for i := last; i > 0; i-- {
		if strings.Contains(hist[i-1].Summary, "ready=true") {
			return hist[i].At, true
		}
	}
	return time.Time{}, false
}

// sameClient says whether a and b came from one client (user and agent).
func sameClient(a, b testenv.AuditEvent) bool {
	return a.User == b.User && a.UserAgent == b.UserAgent
}

// liveRead is a read the cordon's decision may have fed on.
func liveRead(ev testenv.AuditEvent) bool {
	return (ev.Verb == "get" || ev.Verb == "list") &&
		(ev.APIGroup == "" && ev.Resource == "nodes" || ev.APIGroup == "ops.slipway.dev" && ev.Resource == "updatechannels")
}

// decisionBound is what the decision behind cordon could have seen: when
// its client's last live read before it was answered, when that read is the
// decision's (no write of the client between), else when the cordon's
// request was received; with a phrase saying which.
func decisionBound(audit []testenv.AuditEvent, cordon testenv.AuditEvent) (time.Time, string) {
	var read *testenv.AuditEvent
	for i, ev := range audit {
		if liveRead(ev) && sameClient(ev, cordon) && ev.Received.Before(cordon.Received) && (read == nil || ev.Received.After(read.Received)) {
			read = &audit[i]
		}
	}
	what := fmt.Sprintf("the cordon's request (%s)", clock(cordon.Received))
	if read == nil {
		return cordon.Received, what + ", no read of its client before it logged"
	}
	for _, ev := range audit {
		if ev.IsWrite() && sameClient(ev, cordon) && ev.Received.After(read.Received) && ev.Received.Before(cordon.Received) {
			return cordon.Received, fmt.Sprintf("%s, its client's last read (%s %s at %s) followed by its write of %s", what,
				read.Verb, auditName(*read), clock(read.Received), auditName(ev))
		}
	}
	// The read may have been served as late as its answer: the bound is
	// its answer, not its receipt.
	return read.Time, fmt.Sprintf("its client's last read before the cordon's request (%s %s at %s, answered %s; the cordon at %s)",
		read.Verb, auditName(*read), clock(read.Received), clock(read.Time), clock(cordon.Received))
}

// auditName is a request's resource and name.
func auditName(ev testenv.AuditEvent) string {
	if ev.Name == "" {
		return ev.Resource
	}
	return ev.Resource + "/" + ev.Name
}

// clock formats an instant to the microsecond, as the audit log has it.
func clock(t time.Time) string { return t.UTC().Format("15:04:05.000000") }

// raceExcuse reports whether v, a cordon rule's violation, is a cordon
// that raced its budget's downs (see the comment above), with why; every
// other violation is not.
func raceExcuse(v monitor.Violation, audit []testenv.AuditEvent, downs []downSpan) (string, bool) {
	if v.Invariant != monitor.InvCordonBudget && v.Invariant != monitor.InvCordonControlPlane {
		return "", false
	}
	node, seen := cordonSeen(v)
	names, whys, budget, err := spenders(v)
	if err != nil {
		return "", false
	}
	var cordon *testenv.AuditEvent
	for i, ev := range audit {
		if (ev.Verb == "patch" || ev.Verb == "update") && ev.APIGroup == "" && ev.Resource == "nodes" && ev.Name == node &&
			strings.HasPrefix(ev.User, "system:serviceaccount:") && !ev.Received.After(seen) && (cordon == nil || ev.Received.After(cordon.Received)) {
			cordon = &audit[i]
		}
	}
	if cordon == nil {
		return "", false
	}
	bound, boundWhat := decisionBound(audit, *cordon)
	var raced []string
	seenBefore := 0
	for i, n := range names {
		if why, ok := raced1(v, audit, downs, n, whys[i], seen, bound); ok {
			raced = append(raced, why)
		} else {
			seenBefore++
		}
	}
	if seenBefore >= budget || len(raced) == 0 {
		return "", false
	}
	return fmt.Sprintf("a cordon that raced a fault's down: %s, after %s; what the decision could see spent %d of %d",
		strings.Join(raced, "; "), boundWhat, seenBefore, budget), true
}

// raced1 reports whether node n, unavailable for why at the cordon seen,
// went down by a fault after bound (with what and when), see raceExcuse.
func raced1(v monitor.Violation, audit []testenv.AuditEvent, downs []downSpan, n, why string, seen, bound time.Time) (string, bool) {
	if why != "NotReady" {
		return "", false
	}
	began, ok := downBegan(v, n, seen)
	if !ok {
		return "", false
	}
	var by *downSpan
	for i, d := range downs {
		if d.node == n && !began.Before(d.from) && !began.After(d.to) && (by == nil || d.from.After(by.from)) {
			by = &downs[i]
		}
	}
	if by == nil {
		return "", false
	}
	var down *testenv.AuditEvent
	for i, ev := range audit {
		if ev.APIGroup != "" || ev.Name != n || ev.Received.Before(by.from) || ev.Received.After(began) {
			continue
		}
		status := ev.Resource == "nodes/status" && (ev.Verb == "patch" || ev.Verb == "update")
		gone := ev.Resource == "nodes" && (ev.Verb == "delete" || ev.Verb == "create")
		if (status || gone) && (down == nil || ev.Received.Before(down.Received)) {
			down = &audit[i]
		}
	}
	if down == nil {
		return "", false
	}
	committed := down.Time
	if began.Before(committed) {
		committed = began // the monitor saw it before its answer was sent
	}
	if !committed.After(bound) {
		return "", false
	}
	return fmt.Sprintf("%s NotReady by %s (%s %s received %s, committed by %s)", n, by.what, down.Verb, auditName(*down), clock(down.Received), clock(committed)), true
}

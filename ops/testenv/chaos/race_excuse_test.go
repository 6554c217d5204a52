package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/monitor"
)

// The clients of the table: the controller that cordons, its standby, the
// simulated kubelet that reports a node down, and its Lease renewal.
const (
	ctrlUser  = "system:serviceaccount:slipway-system:slipway-controller"
	ctrlAgent = "slipway-controller/v0.0.0-dev pod/controller-a"
	kwokAgent = "kwok/v0.8.0 (linux/amd64)"
)

// ms is base plus n milliseconds.
func ms(base time.Time, n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }

// TestRaceExcuse: a cordon rule's violation is excused only when each node
// that spent the budget went down by a fault after what the decision could
// see: its client's last live read (when nothing it wrote falls between
// that read and the cordon), else the cordon's request.
func TestRaceExcuse(t *testing.T) {
	base := time.Date(2026, 11, 28, 19, 7, 49, 0, time.UTC)
	at := func(n int) time.Time { return ms(base, n) }
	ctrl := func(verb, resource, name string, recv, done int) testenv.AuditEvent {
		ev := testenv.AuditEvent{User: ctrlUser, UserAgent: ctrlAgent, Verb: verb, Resource: resource, Name: name, Received: at(recv), Time: at(done)}
		if resource == "updatechannels" || resource == "updatechannels/status" {
			ev.APIGroup, ev.Namespace = "ops.slipway.dev", "slipway-system"
		}
		if resource == "leases" {
			ev.APIGroup, ev.Namespace = "coordination.k8s.io", "slipway-system"
		}
		return ev
	}
	standby := func(ev testenv.AuditEvent) testenv.AuditEvent {
		ev.UserAgent = "slipway-controller/v0.0.0-dev pod/controller-b"
		return ev
	}
	down := func(node string, recv, done int) testenv.AuditEvent {
		return testenv.AuditEvent{User: "admin", UserAgent: kwokAgent, Verb: "patch", Resource: "nodes/status", Name: node, Received: at(recv), Time: at(done)}
	}
	heartbeat := down // the same request, Ready
	// hist is a node's history: Ready until readyUntil, NotReady seen at
	// downSeen (none when 0).
	hist := func(readyUntil, downSeen int) []monitor.Version {
		h := []monitor.Version{{At: at(-5000), ResourceVersion: "321", Summary: `unschedulable=false cordoned-by="" ready=true boot=b1`}}
		if readyUntil > -5000 {
			h = append(h, monitor.Version{At: at(readyUntil), ResourceVersion: "506", Summary: `unschedulable=false cordoned-by="" ready=true boot=b1`})
		}
		if downSeen != 0 {
			h = append(h, monitor.Version{At: at(downSeen), ResourceVersion: "508", Summary: `unschedulable=false cordoned-by="" ready=false boot=b1`})
		}
		return h
	}
	violation := func(inv string, seen int, down string, concurrency int, history map[string][]monitor.Version) monitor.Violation {
		msg := fmt.Sprintf("slipway cordoned node-2 of channel slipway-system/default while 1 of its other nodes were unavailable, concurrency %d: %s", concurrency, down)
		if inv == monitor.InvCordonControlPlane {
			msg = "slipway cordoned control-plane node node-2 while another was unavailable: " + down
		}
		return monitor.Violation{At: at(seen + 1), Invariant: inv, Key: "node-2@" + at(seen).Format(time.RFC3339Nano), Message: msg, History: history}
	}
	node1 := map[string][]monitor.Version{"Node//node-1": hist(26, 56)}
	cut := []downSpan{{node: "node-1", what: "power-cut", from: at(-10), to: at(16000)}}
	// The finding: node-1's power cut committed its NotReady after the
	// cordon's request was received (no read logged).
	raced := []testenv.AuditEvent{ctrl("patch", "nodes", "node-2", 48, 63), down("node-1", 41, 61)}
	for _, tc := range []struct {
		name  string
		v     monitor.Violation
		audit []testenv.AuditEvent
		downs []downSpan
		want  bool
	}{
		{"raced, no read logged", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady)", 1, node1), raced, cut, true},
		{"raced, control-plane rule", violation(monitor.InvCordonControlPlane, 65, "node-1 (NotReady)", 1, node1), raced, cut, true},
		{"raced, from the monitor process", func() monitor.Violation {
			v := violation(monitor.InvCordonBudget, 64, "node-1 (NotReady)", 1, node1)
			v.Message = processTag + v.Message
			return v
		}(), raced, cut, true},
		{"raced the last live read", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady)", 1, node1),
			[]testenv.AuditEvent{ctrl("get", "nodes", "node-2", 10, 14), ctrl("list", "updatechannels", "", 20, 24), ctrl("list", "nodes", "", 30, 36),
				down("node-1", 31, 40), ctrl("patch", "nodes", "node-2", 48, 63)},
			[]downSpan{{node: "node-1", what: "power-cut", from: at(-10), to: at(16000)}},
			true},
		{"committed before the last live read began", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady)", 1,
			map[string][]monitor.Version{"Node//node-1": hist(-20, 22)}),
			[]testenv.AuditEvent{down("node-1", 1, 20), ctrl("list", "nodes", "", 30, 36), ctrl("patch", "nodes", "node-2", 48, 63)}, cut, false},
		{"committed while the last live read was being answered", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady)", 1,
			map[string][]monitor.Version{"Node//node-1": hist(26, 36)}),
			[]testenv.AuditEvent{ctrl("list", "nodes", "", 30, 40), down("node-1", 31, 35), ctrl("patch", "nodes", "node-2", 48, 63)}, cut, false},
		{"a standby's later read is not the decision's", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady)", 1, node1),
			[]testenv.AuditEvent{ctrl("list", "nodes", "", 30, 36), standby(ctrl("list", "nodes", "", 45, 46)), down("node-1", 31, 40), ctrl("patch", "nodes", "node-2", 48, 63)}, cut, true},
		{"stale decision: cordon 0.9 s after the down, no read", violation(monitor.InvCordonBudget, 970, "node-1 (NotReady)", 1, node1),
			[]testenv.AuditEvent{down("node-1", 41, 61), ctrl("patch", "nodes", "node-2", 950, 960)}, cut, false},
		{"stale decision: an old read, the client's writes between", violation(monitor.InvCordonBudget, 970, "node-1 (NotReady)", 1, node1),
			[]testenv.AuditEvent{ctrl("list", "nodes", "", 10, 14), down("node-1", 41, 61), ctrl("update", "leases", "slipway-controller", 500, 505),
				ctrl("patch", "nodes", "node-2", 950, 960)}, cut, false},
		{"the monitor saw the down before the cordon's request", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady)", 1,
			map[string][]monitor.Version{"Node//node-1": hist(26, 44)}),
			[]testenv.AuditEvent{down("node-1", 41, 61), ctrl("patch", "nodes", "node-2", 48, 63)}, cut, false},
		{"no fault held the node", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady)", 1, node1), raced, nil, false},
		{"a fault of another node", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady)", 1, node1), raced,
			[]downSpan{{node: "node-3", what: "not-ready", from: at(-10), to: at(16000)}}, false},
		{"the fault began after the down", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady)", 1, node1), raced,
			[]downSpan{{node: "node-1", what: "power-cut", from: at(57), to: at(16000)}}, false},
		{"a heartbeat before the down's write is the down's bound", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady)", 1, node1),
			[]testenv.AuditEvent{heartbeat("node-1", 0, 5), down("node-1", 41, 61), ctrl("patch", "nodes", "node-2", 48, 63)}, cut, false},
		{"down before the history begins", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady)", 1,
			map[string][]monitor.Version{"Node//node-1": {{At: at(56), ResourceVersion: "508", Summary: `ready=false`}}}), raced, cut, false},
		{"no down write logged", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady)", 1, node1),
			[]testenv.AuditEvent{ctrl("patch", "nodes", "node-2", 48, 63)}, cut, false},
		{"no cordon request logged", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady)", 1, node1),
			[]testenv.AuditEvent{down("node-1", 41, 61)}, cut, false},
		{"the harness's write is no cordon", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady)", 1, node1),
			[]testenv.AuditEvent{{User: "admin", UserAgent: "slipway-testenv/supervisor", Verb: "patch", Resource: "nodes", Name: "node-2", Received: at(48), Time: at(50)},
				down("node-1", 41, 61)}, cut, false},
		{"a cordon spends the budget", violation(monitor.InvCordonBudget, 65, "node-1 (cordoned by slipway-agent, NotReady)", 1, node1), raced, cut, false},
		{"one raced, one seen before, concurrency 1", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady); node-3 (cordoned by slipway-agent)", 1, node1), raced, cut, false},
		{"one raced, one seen before, concurrency 2", violation(monitor.InvCordonBudget, 65, "node-1 (NotReady); node-3 (cordoned by slipway-agent)", 2, node1), raced, cut, true},
		{"a state invariant is not judged here", monitor.Violation{At: at(66), Invariant: monitor.InvChannelConcurrency, Key: "slipway-system/default",
			Message: "channel slipway-system/default: 2 nodes unavailable, concurrency 1: node-1 (NotReady); node-2 (cordoned by slipway-agent)", History: node1}, raced, cut, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, got := raceExcuse(tc.v, tc.audit, tc.downs)
			if got != tc.want {
				t.Fatalf("raceExcuse(%s %s) = %t (%s), want %t", tc.v.Invariant, tc.v.Message, got, why, tc.want)
			}
			if got && !strings.Contains(why, "node-1 NotReady by ") {
				t.Fatalf("the reason does not say which down raced: %s", why)
			}
		})
	}
}

// TestRaceExcuseFinding judges the finding of k3os-rollback-after-cut-swap
// as the run does (Result.excuser, judgeProcess), from its audit log and
// the violations of both monitors (testdata/race-cut-swap, trimmed to the
// seconds around the cordon): node-1's power cut struck during its
// rollback; its NotReady (the simulated kubelet's status patch, received
// 19:07:49.340677, answered .361002; the monitors saw it at .353361 and
// .356471) committed after the controller's cordon of node-2 was received
// (.347963). Both cordon rules, from either monitor, are excused with
// their reason, and the state invariants and reboots by the power cut as
// before: nothing stands.
func TestRaceExcuseFinding(t *testing.T) {
	dir := filepath.Join("testdata", "race-cut-swap")
	f, err := os.Open(filepath.Join(dir, "violations.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	all, err := monitor.ReadJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	// The violations file of a run lists the run's monitor's findings,
	// then the process's (tagged): the process's go back to a file of
	// their own, as the process wrote them.
	var own, proc []monitor.Violation
	for _, v := range all {
		if m, ok := strings.CutPrefix(v.Message, processTag); ok {
			v.Message = m
			proc = append(proc, v)
		} else {
			own = append(own, v)
		}
	}
	procFile := filepath.Join(t.TempDir(), "monitor.jsonl")
	pf, err := os.Create(procFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range proc {
		if err := monitor.WriteJSON(pf, v); err != nil {
			t.Fatal(err)
		}
	}
	pf.Close()
	cutAt := time.Date(2026, 11, 28, 19, 7, 49, 290_000_000, time.UTC)
	back := time.Date(2026, 11, 28, 19, 7, 50, 544_000_000, time.UTC)
	judge := func(own []monitor.Violation, audit string) Result {
		res := Result{Settled: true, Strikes: []faults.Strike{{Kind: faults.PowerCut, Node: "node-1", At: cutAt, Back: back}}}
		excused := res.excuser(cutAt.Add(-time.Minute), audit)
		for _, v := range own {
			if excused(v) {
				res.Excused = append(res.Excused, v)
			} else {
				res.Violations = append(res.Violations, v)
			}
		}
		if err := judgeProcess(&res, procFile, excused); err != nil {
			t.Fatal(err)
		}
		return res
	}
	isCordon := func(v monitor.Violation) bool {
		return v.Invariant == monitor.InvCordonBudget || v.Invariant == monitor.InvCordonControlPlane
	}
	auditLog := filepath.Join(dir, "audit.log")
	// Both monitors (the process's cordons are the run's, by message),
	// then the process's alone.
	for _, tc := range []struct {
		name string
		own  []monitor.Violation
		tag  string
	}{{"both monitors", own, ""}, {"the monitor process alone", nil, processTag}} {
		res := judge(tc.own, auditLog)
		for _, v := range res.Violations {
			t.Errorf("%s: %s stands: %s", tc.name, v.Invariant, v.Message)
		}
		cordons := 0
		for _, v := range res.Excused {
			if !isCordon(v) {
				continue
			}
			cordons++
			why := res.ExcusedWhy[excuseKey(v)]
			if !strings.HasPrefix(v.Message, tc.tag+"slipway cordoned") ||
				!strings.Contains(why, "node-1 NotReady by power-cut (patch nodes/status/node-1 received 19:07:49.340677, committed by 19:07:49.35") ||
				!strings.Contains(why, "the cordon's request (19:07:49.347963)") {
				t.Errorf("%s: %s %q excused with the reason %q", tc.name, v.Invariant, v.Message, why)
			}
		}
		if cordons != 2 || len(res.MonitorErrors) > 0 {
			t.Errorf("%s: %d cordon rules excused, want 2; monitor errors %v", tc.name, cordons, res.MonitorErrors)
		}
		var rep strings.Builder
		res.Report(&rep)
		if !strings.Contains(rep.String(), "excused (a cordon that raced a fault's down: node-1 NotReady by power-cut") {
			t.Errorf("%s: the report lacks the reason:\n%s", tc.name, rep.String())
		}
	}
	// Without the audit log nothing is known of the race: they stand.
	res := judge(own, filepath.Join(t.TempDir(), "none.log"))
	n := 0
	for _, v := range res.Violations {
		if isCordon(v) {
			n++
		}
	}
	if n != 2 {
		t.Errorf("with no audit log %d cordon rules stand, want 2", n)
	}
}

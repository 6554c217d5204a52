package suc

import (
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/testenv"
)

func TestWriterOf(t *testing.T) {
	for _, tc := range []struct {
		ua, resource, want string
	}{
		{"system-upgrade-controller/v0.0.0 (linux/amd64) kubernetes/$Format", "jobs", writerSUC},
		{"system-upgrade-controller/v0.0.0 (linux/amd64) kubernetes/$Format", "leases", writerLeader},
		{"kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/abc/job-controller", "jobs/status", writerJobs},
		{"kubectl/v1.36.3 (linux/amd64) kubernetes/abc", "nodes", writerJobs},
		{"slipway-testenv/executor", "pods/status", writerJobs},
		{"kube-scheduler/v1.36.3 (linux/amd64) kubernetes/abc/scheduler", "pods/binding", writerJobs},
		{"kwok/v0.8.0", "leases", writerNode},
		{"kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/abc/node-controller", "nodes", writerNode},
		{"curl/8", "nodes", writerOther},
	} {
		if got := writerOf(testenv.AuditEvent{UserAgent: tc.ua, Resource: tc.resource}); got != tc.want {
			t.Errorf("writerOf(%q, %s) = %s, want %s", tc.ua, tc.resource, got, tc.want)
		}
	}
}

func TestSlotTimeline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	const suc, kcm = "system-upgrade-controller/v0", "kube-controller-manager/v1/job-controller"
	ev := func(s float64, ua, verb, resource, name string) testenv.AuditEvent {
		return testenv.AuditEvent{Time: at(s), UserAgent: ua, Verb: verb, Resource: resource, Name: name}
	}
	events := []testenv.AuditEvent{
		ev(0.5, suc, "create", "jobs", "apply-prepare-on-node-1-with-h1"), // an earlier plan's Job: not in the timeline
		ev(1, suc, "create", "jobs", "apply-up-on-node-1-with-h2"),
		ev(1.5, "kubectl/v1", "patch", "nodes", "node-1"),
		ev(2, "slipway-testenv/executor", "update", "pods/status", "apply-up-on-node-1-with-h2-abcde"),
		ev(3, kcm, "update", "jobs/status", "apply-up-on-node-1-with-h2"),
		ev(3.5, suc, "update", "nodes", "node-1"),
		ev(4, suc, "create", "jobs", "apply-up-on-node-2-with-h2"),
		{Time: at(4.5), UserAgent: suc, Verb: "update", Resource: "nodes", Name: "node-2", Code: 409}, // refused: ignored
	}
	line := timelineLine(events, t0, at(10))
	for _, want := range []string{"pod done 1s", "job complete 2s", "cordoned 500ms", "slot freed 2.5s", "next Job created 500ms"} {
		if !strings.Contains(line, want) {
			t.Errorf("timeline %q lacks %q", line, want)
		}
	}
	table := slotTable(events, t0, at(10))
	if len(table) != 3 || !strings.HasPrefix(table[1], "  node-1 | 1.00 | 2.00 | 3.00 | 1.50 | - | 3.50 | 4.00 | 1.00 | 0.50") ||
		!strings.HasPrefix(table[2], "  node-2 | 4.00 | - ") {
		t.Errorf("slot table:\n%s", strings.Join(table, "\n"))
	}
}

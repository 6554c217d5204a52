package monitor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// auditLine is one line of kube-apiserver's JSON audit log, as the
// Metadata level writes it (the fields the monitor reads, and a few more).
func auditLine(verb, resource, ns, name string, code int, at time.Time) string {
	return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","verb":%q,`+
		`"user":{"username":"system:serviceaccount:slipway-system:slipway-eds-controller"},`+
		`"objectRef":{"resource":%q,"namespace":%q,"name":%q,"apiGroup":"eds.slipway.dev","apiVersion":"v1alpha1"},`+
		`"responseStatus":{"metadata":{},"code":%d},"requestReceivedTimestamp":%q,"stageTimestamp":%q}`+"\n",
		verb, resource, ns, name, code, at.UTC().Format(time.RFC3339Nano), at.UTC().Format(time.RFC3339Nano))
}

func TestWriteRequestsRule(t *testing.T) {
	now := time.Unix(1000, 0)
	burst := func(n int, over time.Duration) []time.Time {
		var ts []time.Time
		for i := range n {
			ts = append(ts, now.Add(-over+time.Duration(i)*over/time.Duration(n)))
		}
		return ts
	}
	for _, tc := range []struct {
		name string
		ts   []time.Time
		want bool
	}{
		{"a retry with backoff", burst(13, 5*time.Second), false},
		{"20 in a second", burst(20, time.Second), false},
		{"a hot loop", burst(100, time.Second), true},
		{"21 spread over 5 s", burst(21, 5*time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := WriteRequests(State{Now: now, Requests: map[string][]time.Time{"ExtendedDaemonSet/ns/agent": tc.ts}}, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(fs) > 0; got != tc.want {
				t.Errorf("violation %t, want %t: %+v", got, tc.want, fs)
			}
		})
	}
}

// TestPlantedRefusedHotLoop writes an audit log as the API server does: 10
// refused PATCHes of an ExtendedDaemonSet within a second report nothing;
// 60 more (a refused write retried at full speed: no version, so
// bounded-writes sees nothing) are reported; creates with a generated name
// and reads never count. A line cut in the middle waits for its end.
func TestPlantedRefusedHotLoop(t *testing.T) {
	log := filepath.Join(t.TempDir(), "audit.log")
	clock := time.Now()
	m, err := New(Config{AuditLog: log, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	appendLog := func(s string) {
		t.Helper()
		f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	for i := range 10 {
		b.WriteString(auditLine("patch", "extendeddaemonsets", "default", "agent", 422, clock.Add(-time.Second+time.Duration(i)*50*time.Millisecond)))
	}
	for i := range 50 {
		b.WriteString(auditLine("create", "pods", "default", "", 201, clock.Add(time.Duration(i)*time.Millisecond)))
		b.WriteString(auditLine("get", "extendeddaemonsets", "default", "agent", 200, clock.Add(time.Duration(i)*time.Millisecond)))
	}
	appendLog(b.String())
	m.Tick()
	if vs := m.Violations(); len(vs) > 0 {
		t.Fatalf("10 refused writes in a second: %v", vs)
	}
	b.Reset()
	for i := range 60 {
		b.WriteString(auditLine("patch", "extendeddaemonsets", "default", "agent", 422, clock.Add(-900*time.Millisecond+time.Duration(i)*10*time.Millisecond)))
	}
	s := b.String()
	appendLog(s[:len(s)-40]) // the batch cut within its last line
	m.Tick()
	appendLog(s[len(s)-40:])
	m.Tick()
	vs := m.Violations()
	if len(vs) != 1 || vs[0].Invariant != InvWriteRequests || vs[0].Key != "ExtendedDaemonSet/default/agent" {
		t.Fatalf("violations %v, want one %s of ExtendedDaemonSet/default/agent", vs, InvWriteRequests)
	}
	if !strings.Contains(vs[0].Message, "write requests within 1s (bound 20), refused ones included") {
		t.Errorf("message: %s", vs[0].Message)
	}
	if errs := m.Errors(); len(errs) > 0 {
		t.Errorf("errors: %v", errs)
	}
}

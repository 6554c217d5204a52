package scale

import (
	"testing"
	"time"

	"slipway.dev/slipway/ops/testenv"
)

func TestClientOf(t *testing.T) {
	for _, c := range []struct {
		ua, user, want string
	}{
		{"kube-controller-manager/v1.34.1 (linux/amd64) kubernetes/abc/system:serviceaccount:kube-system:job-controller",
			"system:serviceaccount:kube-system:job-controller", "kube-controller-manager(job-controller)"},
		{"slipway-agent/dev", "system:serviceaccount:slipway-system:slipway-agent", "slipway-agent"},
		{"slipway-testenv/heartbeat", "admin", "slipway-testenv/heartbeat"},
		{"kubectl/v1.34.1 (linux/amd64) kubernetes/abc", "system:serviceaccount:system-upgrade:system-upgrade", "kubectl"},
		{"", "admin", ""},
	} {
		if got := clientOf(testenv.AuditEvent{UserAgent: c.ua, User: c.user}); got != c.want {
			t.Errorf("clientOf(%q, %q) = %q, want %q", c.ua, c.user, got, c.want)
		}
	}
}

func TestWritesByClient(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ev := func(s int, ua, verb, res string) testenv.AuditEvent {
		return testenv.AuditEvent{Time: at(s), UserAgent: ua, Verb: verb, Resource: res}
	}
	events := []testenv.AuditEvent{
		ev(-1, "slipway-agent/dev", "patch", "nodes"), // before the window
		ev(0, "slipway-agent/dev", "patch", "nodes"),  // at its start: in
		ev(5, "slipway-agent/dev", "patch", "nodes"),
		ev(6, "slipway-agent/dev", "create", "jobs"),
		ev(7, "kwok/v0.8.0", "update", "leases"),   // a Lease: apart
		ev(8, "slipway-agent/dev", "get", "nodes"), // a read
		ev(9, "slipway-controller/dev", "patch", "nodes"),
		ev(10, "slipway-controller/dev", "update", "updatechannels/status"), // at its end: in
		ev(11, "slipway-controller/dev", "patch", "nodes"),                  // after it
	}
	got := formatWrites(writesByClient(events, at(0), at(10)))
	want := "audit_writes=slipway-agent:patch:nodes:2,slipway-agent:create:jobs:1,slipway-controller:patch:nodes:1,slipway-controller:update:updatechannels/status:1"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestNodeReadsByClient(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC)
	ev := func(s int, ua, verb, uri, name string) testenv.AuditEvent {
		return testenv.AuditEvent{Time: t0.Add(time.Duration(s) * time.Second), UserAgent: ua, Verb: verb, Resource: "nodes", Name: name, RequestURI: uri}
	}
	events := []testenv.AuditEvent{
		ev(1, "kwok/v0.8.0", "watch", "/api/v1/nodes?allowWatchBookmarks=true&resourceVersion=100&watch=true", ""),
		ev(2, "kwok/v0.8.0", "list", "/api/v1/nodes?limit=500&resourceVersion=0", ""),
		ev(3, "slipway-agent/dev", "list", "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-1&limit=500", "node-1"),
		ev(4, "slipway-agent/dev", "watch", "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-1&watch=true", "node-1"),
		ev(5, "slipway-agent/dev", "watch", "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-2&watch=true", ""), // named by the selector alone
		ev(6, "slipway-agent/dev", "get", "/api/v1/nodes/node-1", "node-1"),                                      // a GET: not counted
		ev(30, "kwok/v0.8.0", "list", "/api/v1/nodes?limit=500", ""),                                             // after the window
	}
	got := formatNodeReads(nodeReadsByClient(events, t0, t0.Add(10*time.Second)))
	want := "audit_node_reads=slipway-agent:watch:one:2,kwok:list:all:1,kwok:watch:all:1,slipway-agent:list:one:1"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

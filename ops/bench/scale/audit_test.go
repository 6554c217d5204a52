package scale

import (
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/testenv"
)

// writeCount is how many writes one client made of one kind (verb and
// resource) within a window.
type writeCount struct {
	client, verb, resource string
	count                  int
}

// clientOf names the client of an audited request: the first part of its
// user agent (kube-controller-manager, kwok, slipway-agent, kubectl, ...),
// and for kube-controller-manager the controller whose service account
// made it (job-controller, node-lifecycle-controller, ...); "slipway-testenv"
// with the part of the simulation after it (supervisor, executor,
// heartbeat).
func clientOf(ev testenv.AuditEvent) string {
	parts := strings.Split(ev.UserAgent, "/")
	name := parts[0]
	switch {
	case name == "slipway-testenv" && len(parts) > 1:
		return name + "/" + parts[1]
	case strings.HasPrefix(ev.User, "system:serviceaccount:kube-system:"):
		return name + "(" + strings.TrimPrefix(ev.User, "system:serviceaccount:kube-system:") + ")"
	}
	return name
}

// writesByClient counts the writes within [from, to] by client, verb and
// resource, Leases apart (the bench reports its counts with and without
// them), most first.
func writesByClient(events []testenv.AuditEvent, from, to time.Time) []writeCount {
	counts := map[writeCount]int{}
	for _, ev := range events {
		if !ev.IsWrite() || ev.Time.Before(from) || ev.Time.After(to) || strings.HasPrefix(ev.Resource, "leases") {
			continue
		}
		counts[writeCount{client: clientOf(ev), verb: ev.Verb, resource: ev.Resource}]++
	}
	return mostFirst(counts, func(c writeCount, n int) writeCount { c.count = n; return c })
}

func (c writeCount) order() string { return c.client + "\x00" + c.verb + "\x00" + c.resource }

// mostFirst are the keys of counts with their counts (withCount), the
// highest count first, ties in their order().
func mostFirst[K interface {
	comparable
	order() string
}](counts map[K]int, withCount func(K, int) K) []K {
	keys := slices.Collect(maps.Keys(counts))
	slices.SortFunc(keys, func(a, b K) int { return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a.order(), b.order())) })
	out := make([]K, len(keys))
	for i, k := range keys {
		out[i] = withCount(k, counts[k])
	}
	return out
}

// formatWrites is the counts as one key=value field for the SCALE line:
// client:verb:resource:count, comma-separated.
func formatWrites(counts []writeCount) string {
	parts := make([]string, 0, len(counts))
	for _, c := range counts {
		parts = append(parts, fmt.Sprintf("%s:%s:%s:%d", c.client, c.verb, c.resource, c.count))
	}
	return "audit_writes=" + strings.Join(parts, ",")
}

// nodeReadCount is how many Node LISTs or ended watches one client made
// within a window, of all Nodes or of one (a field selector).
type nodeReadCount struct {
	client, verb, scope string
	count               int
}

// nodeReadsByClient counts the LISTs of Nodes and the Node watches that
// ended within [from, to], by client and scope ("all" Nodes, or "one" by
// a field selector), most first. A watcher of all Nodes that kube-apiserver
// ends as too slow shows as an ended watch and, when its informer lists
// again, a LIST: this names who did.
func nodeReadsByClient(events []testenv.AuditEvent, from, to time.Time) []nodeReadCount {
	counts := map[nodeReadCount]int{}
	for _, ev := range events {
		if ev.Resource != "nodes" || (ev.Verb != "list" && ev.Verb != "watch") || ev.Time.Before(from) || ev.Time.After(to) {
			continue
		}
		// The API server names the object of a LIST or watch by
		// metadata.name: its audit entry carries the name.
		scope := "all"
		if ev.Name != "" || strings.Contains(ev.RequestURI, "fieldSelector=") {
			scope = "one"
		}
		counts[nodeReadCount{client: clientOf(ev), verb: ev.Verb, scope: scope}]++
	}
	return mostFirst(counts, func(c nodeReadCount, n int) nodeReadCount { c.count = n; return c })
}

func (c nodeReadCount) order() string { return c.client + "\x00" + c.verb + "\x00" + c.scope }

// formatNodeReads is the counts as one key=value field for the SCALE
// line: client:verb:scope:count, comma-separated.
func formatNodeReads(counts []nodeReadCount) string {
	parts := make([]string, 0, len(counts))
	for _, c := range counts {
		parts = append(parts, fmt.Sprintf("%s:%s:%s:%d", c.client, c.verb, c.scope, c.count))
	}
	return "audit_node_reads=" + strings.Join(parts, ",")
}

// auditedRequests reads the audit log once the API server has flushed the
// window's last batch, and counts the window's writes and Node reads.
func auditedRequests(b *testing.B, e *testenv.Env, from, to time.Time) []string {
	time.Sleep(3 * time.Second) // the log's batches wait up to 1 s
	events, err := testenv.ReadAuditAll(filepath.Join(e.Dir, auditFile))
	if err != nil {
		b.Fatalf("the audit log: %v", err)
	}
	return []string{formatWrites(writesByClient(events, from, to)), formatNodeReads(nodeReadsByClient(events, from, to))}
}

// auditNodeReads are the Node reads the audit log keeps beside the writes
// (withAudit): LISTs, and watches (logged as they end).
var auditNodeReads = []testenv.AuditGets{{Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}}}

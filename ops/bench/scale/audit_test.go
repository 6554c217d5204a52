package scale

import (
	"cmp"
	"fmt"
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
	out := make([]writeCount, 0, len(counts))
	for k, n := range counts {
		k.count = n
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b writeCount) int {
		return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.client, b.client), cmp.Compare(a.verb, b.verb), cmp.Compare(a.resource, b.resource))
	})
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

// auditedWrites reads the audit log once the API server has flushed the
// window's last batch, and counts the window's writes.
func auditedWrites(b *testing.B, e *testenv.Env, from, to time.Time) string {
	time.Sleep(3 * time.Second) // the log's batches wait up to 1 s
	events, err := testenv.ReadAudit(filepath.Join(e.Dir, auditFile))
	if err != nil {
		b.Fatalf("the audit log: %v", err)
	}
	return formatWrites(writesByClient(events, from, to))
}

package monitor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// InvWriteRequests names the rule WriteRequests.
const InvWriteRequests = "bounded-write-requests"

// WriteRequests: no object receives more than Limits.MaxWriteRequests
// write requests (update, patch or delete of it by name, whatever the
// answer) within any Limits.Window. Unlike bounded-writes, which counts
// the versions the watches show, this reads the API server's audit log
// (Config.AuditLog): a controller retrying a write the API server refuses
// (an admission policy, a conflict) in a hot loop writes no version, but
// sends every request.
func WriteRequests(s State, l Limits) ([]Finding, error) {
	l = l.withDefaults()
	var out []Finding
	for k, ts := range s.Requests {
		if len(ts) <= l.MaxWriteRequests {
			continue
		}
		if n := maxInWindow(ts, l.Window); n > l.MaxWriteRequests {
			out = append(out, Finding{Invariant: InvWriteRequests, Key: k,
				Message: fmt.Sprintf("%s: %d write requests within %s (bound %d), refused ones included", k, n, l.Window, l.MaxWriteRequests),
				Objects: []string{k}})
		}
	}
	slices.SortFunc(out, func(a, b Finding) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// auditTail reads an audit log (kube-apiserver --audit-log-format=json) as
// it grows: each read returns the write requests of the complete lines
// written since the last.
type auditTail struct {
	mu   sync.Mutex // Tick runs from the monitor's ticker and from its caller
	path string
	off  int64
	part []byte
}

// auditRequest is one write request by name: the object's key as the
// history keeps it when it is known (Kind/namespace/name for the kinds the
// monitor watches; resource/namespace/name otherwise) and when its
// answer was sent.
type auditRequest struct {
	Key string
	At  time.Time
}

// auditKinds maps the watched resources to the kinds of the history keys.
var auditKinds = map[string]string{"nodes": "Node", "pods": "Pod", "jobs": "Job", "leases": "Lease", "events": "Event",
	"updatechannels": "UpdateChannel", "extendeddaemonsets": "ExtendedDaemonSet", "extendeddaemonsetreplicasets": "ExtendedDaemonSetReplicaSet"}

func (t *auditTail) read() ([]auditRequest, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, err := os.Open(t.path)
	if os.IsNotExist(err) {
		return nil, nil // not written yet
	}
	if err != nil {
		return nil, fmt.Errorf("open the audit log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return nil, fmt.Errorf("seek the audit log: %w", err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read the audit log: %w", err)
	}
	t.off += int64(len(b))
	b = append(t.part, b...)
	end := bytes.LastIndexByte(b, '\n')
	if end < 0 {
		t.part = b
		return nil, nil
	}
	t.part = slices.Clone(b[end+1:])
	var out []auditRequest
	for _, line := range bytes.Split(b[:end], []byte("\n")) {
		var l struct {
			Verb      string `json:"verb"`
			ObjectRef *struct {
				APIGroup    string `json:"apiGroup"`
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
				Namespace   string `json:"namespace"`
				Name        string `json:"name"`
			} `json:"objectRef"`
			StageTimestamp time.Time `json:"stageTimestamp"`
		}
		if len(line) == 0 || json.Unmarshal(line, &l) != nil || l.ObjectRef == nil || l.ObjectRef.Name == "" {
			continue
		}
		if l.Verb != "update" && l.Verb != "patch" && l.Verb != "delete" {
			continue
		}
		r := l.ObjectRef
		kind := auditKinds[r.Resource]
		if kind == "" {
			kind = r.Resource
		}
		out = append(out, auditRequest{Key: kind + "/" + r.Namespace + "/" + r.Name, At: l.StageTimestamp})
	}
	return out, nil
}

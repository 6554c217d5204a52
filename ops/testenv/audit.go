package testenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// auditPolicy logs every write request once, when its response is sent,
// with its metadata only (no bodies): enough to count writes by client and
// to rebuild a timeline.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted, Panic]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`

// auditFlags are kube-apiserver's flags for Options.AuditLog (none when unset).
func (e *Env) auditFlags() ([]string, error) {
	if e.opts.AuditLog == "" {
		return nil, nil
	}
	policy := filepath.Join(e.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, fmt.Errorf("write the audit policy: %w", err)
	}
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + e.opts.AuditLog,
		"--audit-log-format=json", "--audit-log-mode=batch", "--audit-log-batch-max-wait=1s"}, nil
}

// AuditEvent is one write request from the audit log.
type AuditEvent struct {
	Time      time.Time // when the response was sent
	UserAgent string
	Verb      string // create, update, patch, delete
	Resource  string // e.g. "nodes", "updatechannels/status"
	Name      string
	Code      int // the response's HTTP status
}

type auditLine struct {
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	StageTimestamp time.Time `json:"stageTimestamp"`
}

// ReadAudit parses an audit log written through Options.AuditLog.
func ReadAudit(path string) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open the audit log: %w", err)
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("parse the audit log %s: %w", path, err)
		}
		ev := AuditEvent{Time: l.StageTimestamp, UserAgent: l.UserAgent, Verb: l.Verb}
		if r := l.ObjectRef; r != nil {
			ev.Resource, ev.Name = r.Resource, r.Name
			if r.Subresource != "" {
				ev.Resource += "/" + r.Subresource
			}
		}
		if l.ResponseStatus != nil {
			ev.Code = l.ResponseStatus.Code
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}

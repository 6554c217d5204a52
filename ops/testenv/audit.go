package testenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// AuditGets names get and list requests for the audit log to keep beside
// the writes (Options.AuditGets).
type AuditGets struct {
	// UserGroups are the groups of the users whose reads are kept, as the
	// API server authenticated them (an impersonated request is its
	// impersonator's); none: every user's.
	UserGroups []string
	// Group is the API group of Resources ("" for the core group).
	Group string
	// Resources are the resources read (e.g. "nodes"; a subresource is
	// "nodes/status").
	Resources []string
	// Verbs are the reads kept (default get and list; a watch is logged
	// when it ends, with its start as Received).
	Verbs []string
}

// policyWithGets is the write policy with a Metadata rule for each of
// gets (a list of names is written as JSON, which YAML reads).
func policyWithGets(gets []AuditGets) (string, error) {
	var b strings.Builder
	for _, g := range gets {
		if len(g.Resources) == 0 {
			return "", fmt.Errorf("audit gets of group %q name no resource: name the resources to log reads of", g.Group)
		}
		group, _ := json.Marshal(g.Group)
		res, _ := json.Marshal(g.Resources)
		verbs := []string{"get", "list"}
		if len(g.Verbs) > 0 {
			verbs = g.Verbs
		}
		vs, _ := json.Marshal(verbs)
		fmt.Fprintf(&b, "- level: Metadata\n  verbs: %s\n  resources: [{group: %s, resources: %s}]\n", vs, group, res)
		if len(g.UserGroups) > 0 {
			ug, _ := json.Marshal(g.UserGroups)
			fmt.Fprintf(&b, "  userGroups: %s\n", ug)
		}
	}
	const none = "- level: None\n"
	return strings.TrimSuffix(auditPolicy, none) + b.String() + none, nil
}

// auditPolicyWithReads logs every request but the apiserver's own
// health checks (Options.AuditReads).
const auditPolicyWithReads = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted, Panic]
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version", "/openapi*", "/api*"]
- level: Metadata
`

// auditFlags are kube-apiserver's flags for Options.AuditLog (none when unset).
func (e *Env) auditFlags() ([]string, error) {
	if e.opts.AuditLog == "" {
		return nil, nil
	}
	body := auditPolicy
	switch {
	case e.opts.AuditReads:
		body = auditPolicyWithReads
	case len(e.opts.AuditGets) > 0:
		var err error
		if body, err = policyWithGets(e.opts.AuditGets); err != nil {
			return nil, err
		}
	}
	policy := filepath.Join(e.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(body), 0o600); err != nil {
		return nil, fmt.Errorf("write the audit policy: %w", err)
	}
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + e.opts.AuditLog,
		"--audit-log-format=json", "--audit-log-mode=batch", "--audit-log-batch-max-wait=1s"}, nil
}

// AuditEvent is one request from the audit log.
type AuditEvent struct {
	Time time.Time // when the response was sent
	// Received is when the API server received the request.
	Received  time.Time
	UserAgent string
	// User is who the request acted as: the impersonated user when there
	// is one, else the authenticated one.
	User      string
	Verb      string // create, update, patch, delete (get, list, watch with Options.AuditReads)
	APIGroup  string // "" for the core group
	Resource  string // e.g. "nodes", "updatechannels/status"
	Namespace string
	Name      string
	Code      int // the response's HTTP status
	// RequestURI is the request's path and query (its selectors, a watch's
	// resourceVersion).
	RequestURI string
}

// IsWrite says whether the request could change state.
func (ev AuditEvent) IsWrite() bool {
	switch ev.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

type auditUser struct {
	Username string `json:"username"`
}

type auditLine struct {
	Verb             string     `json:"verb"`
	RequestURI       string     `json:"requestURI"`
	UserAgent        string     `json:"userAgent"`
	User             auditUser  `json:"user"`
	ImpersonatedUser *auditUser `json:"impersonatedUser"`
	ObjectRef        *struct {
		APIGroup    string `json:"apiGroup"`
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time `json:"stageTimestamp"`
}

// ReadAudit parses the write requests of an audit log written through
// Options.AuditLog.
func ReadAudit(path string) ([]AuditEvent, error) {
	all, err := ReadAuditAll(path)
	writes := all[:0]
	for _, ev := range all {
		if ev.IsWrite() {
			writes = append(writes, ev)
		}
	}
	return writes, err
}

// ReadAuditAll parses every request of an audit log written through
// Options.AuditLog (reads only with Options.AuditReads or
// Options.AuditGets).
func ReadAuditAll(path string) ([]AuditEvent, error) {
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
		ev := AuditEvent{Time: l.StageTimestamp, Received: l.RequestReceivedTimestamp, UserAgent: l.UserAgent, Verb: l.Verb, User: l.User.Username,
			RequestURI: l.RequestURI}
		if l.ImpersonatedUser != nil {
			ev.User = l.ImpersonatedUser.Username
		}
		if r := l.ObjectRef; r != nil {
			ev.APIGroup, ev.Resource, ev.Namespace, ev.Name = r.APIGroup, r.Resource, r.Namespace, r.Name
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

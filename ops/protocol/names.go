package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// The names both sides derive: the controller names a slot's Job when it
// grants the slot, the node's agent creates it by that name; the agent
// renews its heartbeat Lease by its node's name, the controller reads it.

var labelBad = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// LabelValue turns s into a valid label value: characters outside
// [A-Za-z0-9._-] become '-', it starts and ends alphanumeric, and at most 63
// characters (a longer value keeps a hash of the whole).
func LabelValue(s string) string {
	v := strings.Trim(labelBad.ReplaceAllString(s, "-"), "-._")
	if len(v) > 63 {
		v = strings.Trim(v[:54], "-._") + "-" + ShortHash(s)
	}
	return v
}

var dnsBad = regexp.MustCompile(`[^a-z0-9-]+`)

// DNSLabel turns s into a valid DNS label (RFC 1123): lower case,
// [a-z0-9-], at most 63 characters (a longer name keeps a hash of the whole).
func DNSLabel(s string) string {
	v := strings.Trim(dnsBad.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(v) > 63 {
		v = strings.Trim(v[:54], "-") + "-" + ShortHash(s)
	}
	if v == "" {
		v = "x" + ShortHash(s)
	}
	return v
}

// ShortHash is 8 hex digits of s's SHA-256: what keeps names cut short apart.
func ShortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}

// AgentLeaseName names the heartbeat Lease of node's agent.
func AgentLeaseName(node string) string {
	if name := AgentLeasePrefix + node; len(name) <= 253 {
		return name // node names are DNS subdomains, and so is this
	}
	return AgentLeasePrefix + DNSLabel(node)
}

// SlotSince is a slot's claim time as the API server stores it (metav1.Time
// keeps whole seconds), so the writer and every reader agree on it.
func SlotSince(s v1.Slot) string {
	return s.Since.Time.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// SlotJobName names the upgrade Job of one slot of one channel: node,
// version, a short hash of the channel's UID and the slot's claim time (the
// rollout), and the attempt. A retry, a later rollout to the same version
// and a recreated channel each get a new name, so no Job of another rollout
// is ever taken for this one's.
//
// A rollback slot's Job (Slot.Rollback: `ops rollback`, back to version)
// is of the rollback kind, under that kind's prefix.
func SlotJobName(channelUID types.UID, s v1.Slot) string {
	rollout := ShortHash(string(channelUID) + "/" + SlotSince(s))[:6]
	kind := JobKindUpgrade
	if s.Rollback {
		kind = JobKindRollback
	}
	return JobName(kind, s.Node, s.Version, rollout, strconv.Itoa(s.Attempt))
}

// The kinds of Job an agent creates: the first word of their names.
const (
	JobKindUpgrade  = "upgrade"
	JobKindStage    = "stage"
	JobKindPrune    = "prune"
	JobKindRollback = "rollback"
)

// JobName names a Job of kind that node's agent creates: JobNamePrefix,
// then the parts joined by '-' (lower case, [a-z0-9-]); a name longer
// than 63 characters (a Job's name is its pods' job-name label) keeps its
// first 54 characters, the whole prefix, and a hash of the whole (under
// the long form of the prefix, always, and of the node's whole name). The
// admission policy admits an agent's Job only under its own node's
// prefix, so no agent can take the name another node's agent will create.
func JobName(kind, node string, parts ...string) string {
	p := JobNamePrefix(kind, node)
	joined := strings.Join(parts, "-")
	rest := strings.TrimRight(dnsBad.ReplaceAllString(strings.ToLower(joined), "-"), "-")
	if strings.Trim(rest, "-") == "" {
		rest = ShortHash(joined)
	}
	v := p + rest
	switch {
	case p != kind+"-"+strconv.Itoa(len(node))+"-"+node+"-":
		// The long form: nodes that share its prefix keep apart by a hash
		// of the node's whole name.
		v = strings.TrimRight(v[:min(len(v), JobPrefixMax)], "-") + "-" + ShortHash(node+"/"+joined)
	case len(v) > 63:
		v = strings.TrimRight(v[:JobPrefixMax], "-") + "-" + ShortHash(p+joined)
	}
	return v
}

// JobPrefixMax is the longest JobNamePrefix: what a name cut to 63
// characters keeps whole (54, and 9 for a hash of the whole).
const JobPrefixMax = 54

// The long form of JobNamePrefix: the node's first JobNodeHead and last
// JobNodeTail characters.
const (
	JobNodeHead = 24
	JobNodeTail = 15
)

// JobNamePrefix is how every name of node's Jobs of kind starts: kind, the
// length of the node's name, the node's name, and '-'
// (upgrade-6-node-1-, upgrade-11-node-1.lan-). The node's name is kept as
// it is, dots included (a Job's name is a DNS subdomain, as a Node's is),
// so nodes whose names differ only in a dot or a dash (a.b, a-b) get
// prefixes apart; the length keeps apart nodes whose names extend one
// another (node-1 and node-1-2: "upgrade-6-node-1-" is no prefix of
// "upgrade-8-node-1-2-"). No prefix is another's prefix, so the
// admission policy's startsWith binds a name to one node.
//
// A prefix longer than JobPrefixMax (a node's name of more than 41 to 44
// characters, by kind) leaves too little for the rest of a name: the long
// form keeps the length, the node's first JobNodeHead characters, '-' and
// its last JobNodeTail (a dot next to that '-' made '-'). The admission policy cannot compute
// a hash (CEL has none), so the name is bound to that much of the node:
// two nodes of the same name length that agree in their first 24 and last
// 15 characters share a prefix (docs/security.md, "Job names").
func JobNamePrefix(kind, node string) string {
	p := kind + "-" + strconv.Itoa(len(node)) + "-" + node + "-"
	if len(p) <= JobPrefixMax {
		return p
	}
	part := node
	if len(node) > JobNodeHead+JobNodeTail {
		// A dot beside the '-' that joins them would make no DNS name.
		part = strings.ReplaceAll(strings.ReplaceAll(node[:JobNodeHead]+"-"+node[len(node)-JobNodeTail:], ".-", "--"), "-.", "--")
	}
	return kind + "-" + strconv.Itoa(len(node)) + "-" + part + "-"
}

package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
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
func SlotJobName(channelUID types.UID, s v1.Slot) string {
	rollout := ShortHash(string(channelUID) + "/" + SlotSince(s))[:6]
	return DNSLabel(fmt.Sprintf("upgrade-%s-%s-%s-%d", s.Node, s.Version, rollout, s.Attempt))
}

package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/agent/plan"
	"slipway.dev/slipway/upgrade/layout"
)

// Versions are the versions of a node's components: what a system
// directory's `current` links name, or what a boot runs.
type Versions = plan.Versions

// ReadVersions reads the current versions of the system directory root.
func ReadVersions(root string) (Versions, error) {
	l := layout.New(root)
	var v Versions
	for _, c := range []struct {
		comp layout.Component
		out  *string
	}{{layout.Rootfs, &v.Rootfs}, {layout.Kernel, &v.Kernel}, {layout.K3s, &v.K3s}} {
		cur, err := l.Current(c.comp)
		if err != nil {
			return v, fmt.Errorf("read the %s version of system directory %s: %w", c.comp, root, err)
		}
		*c.out = cur
	}
	return v, nil
}

// nodeMeta is the labels and annotations that publish v on a Node; empty
// versions remove their keys (nil values in a merge patch).
func nodeMeta(v Versions) (labels, annotations map[string]any) {
	labels, annotations = map[string]any{}, map[string]any{}
	for _, kv := range []struct{ label, annotation, value string }{
		{LabelRootfsVersion, AnnotationRootfsVersion, v.Rootfs},
		{LabelKernelVersion, AnnotationKernelVersion, v.Kernel},
		{LabelK3sVersion, AnnotationK3sVersion, v.K3s},
	} {
		if kv.value == "" {
			labels[kv.label], annotations[kv.annotation] = nil, nil
			continue
		}
		labels[kv.label], annotations[kv.annotation] = LabelValue(kv.value), kv.value
	}
	return labels, annotations
}

var labelBad = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// LabelValue turns s into a valid label value: characters outside
// [A-Za-z0-9._-] become '-', it starts and ends alphanumeric, and at most 63
// characters (a longer value keeps a hash of the whole).
func LabelValue(s string) string {
	v := strings.Trim(labelBad.ReplaceAllString(s, "-"), "-._")
	if len(v) > 63 {
		v = strings.Trim(v[:54], "-._") + "-" + shortHash(s)
	}
	return v
}

var dnsBad = regexp.MustCompile(`[^a-z0-9-]+`)

// DNSLabel turns s into a valid DNS label (RFC 1123): lower case,
// [a-z0-9-], at most 63 characters (a longer name keeps a hash of the whole).
func DNSLabel(s string) string {
	v := strings.Trim(dnsBad.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(v) > 63 {
		v = strings.Trim(v[:54], "-") + "-" + shortHash(s)
	}
	if v == "" {
		v = "x" + shortHash(s)
	}
	return v
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}

// channelOf names the channel of an upgrade Job or its pod: the exact name
// from its annotation, else (a Job of an older agent) its label, which is
// the name itself when it is short enough to be a label value.
func channelOf(m metav1.ObjectMeta) string {
	if c, ok := m.Annotations[AnnotationJobChannel]; ok {
		return c
	}
	return m.Labels[LabelJobChannel]
}

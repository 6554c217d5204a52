package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	opslisters "slipway.dev/slipway/ops/generated/listers/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
)

// TestCordonMetrics: the controller holding the Lease reports, from its
// caches, since when each node is held cordoned for a channel and each
// channel's slot limit; a replica that does not lead reports neither.
func TestCordonMetrics(t *testing.T) {
	nodes := cache.NewStore(cache.MetaNamespaceKeyFunc)
	node := func(name string, ann map[string]string) {
		if err := nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}); err != nil {
			t.Fatal(err)
		}
	}
	node("held", map[string]string{drain.AnnotationCordonedBy: protocol.CordonOwner, protocol.AnnotationCordonedFor: "ns/default", protocol.AnnotationDrainStarted: "2026-01-02T03:04:05.5Z"})
	node("by-hand", map[string]string{drain.AnnotationCordonedBy: "kubectl", protocol.AnnotationCordonedFor: "ns/default", protocol.AnnotationDrainStarted: "2026-01-02T03:04:05Z"})
	node("free", nil)
	channels := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	minute := func(m int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(m) * time.Minute} }
	for _, c := range []*v1.UpdateChannel{
		{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "ns"}, Spec: v1.UpdateChannelSpec{URL: "file:///mirror", UpgradeTimeout: minute(15),
			NodeReadyTimeout: minute(10), RebootDelay: minute(1), Drain: &v1.DrainSpec{Timeout: minute(10)}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "broken", Namespace: "ns"}, Spec: v1.UpdateChannelSpec{URL: "ftp://nowhere"}},
	} {
		if err := channels.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	a := &Controller{opts: Options{Namespace: "ns"}, nodes: nodes, channels: opslisters.NewUpdateChannelLister(channels)}
	m := newCordonMetrics(a)
	if n := testutil.CollectAndCount(m); n != 0 {
		t.Errorf("a replica without the Lease reports %d series, want none", n)
	}
	a.elected.Store(true)
	want := `
# HELP slipway_channel_node_cordoned_since_timestamp_seconds When the drain that cordoned a node for a slot of the channel began (Unix seconds), while slipway holds that cordon (reported by the controller holding the Lease).
# TYPE slipway_channel_node_cordoned_since_timestamp_seconds gauge
slipway_channel_node_cordoned_since_timestamp_seconds{channel="default",node="held"} 1.7673230455e+09
# HELP slipway_channel_slot_limit_seconds How long a slot of the channel may last (upgradeTimeout + drain.timeout + rebootDelay + nodeReadyTimeout + 2m) before the controller takes it away and uncordons its node (reported by the controller holding the Lease).
# TYPE slipway_channel_slot_limit_seconds gauge
slipway_channel_slot_limit_seconds{channel="default"} 2280
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	a.elected.Store(false)
	if n := testutil.CollectAndCount(m); n != 0 {
		t.Errorf("a replica that lost the Lease still reports %d series", n)
	}
}

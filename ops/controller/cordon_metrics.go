package controller

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
)

// cordonMetrics are the controller's gauges of the cordons it holds, read
// from its caches at each scrape while it holds the Lease (a replica that
// does not lead reports none): since when each node is held cordoned for a
// channel (plan.HeldCordons), and how long a channel's slot may last
// (plan.MaxSlotAge, past which the controller takes the slot away and lifts
// the cordon). The alert SlipwayNodeCordonedTooLong compares the two.
type cordonMetrics struct {
	ctl       *Controller
	mu        sync.Mutex // one scrape at a time refills the gauges
	since     *prometheus.GaugeVec
	slotLimit *prometheus.GaugeVec
}

func newCordonMetrics(ctl *Controller) *cordonMetrics {
	return &cordonMetrics{ctl: ctl,
		since: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_channel_node_cordoned_since_timestamp_seconds",
			Help: "When the drain that cordoned a node for a slot of the channel began (Unix seconds), while slipway holds that cordon (reported by the controller holding the Lease)."},
			[]string{"channel", "node"}),
		slotLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_channel_slot_limit_seconds",
			Help: "How long a slot of the channel may last (upgradeTimeout + drain.timeout + rebootDelay + nodeReadyTimeout + 2m) before the controller takes it away and uncordons its node (reported by the controller holding the Lease)."},
			[]string{"channel"}),
	}
}

// Describe implements prometheus.Collector.
func (m *cordonMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.since.Describe(ch)
	m.slotLimit.Describe(ch)
}

// Collect implements prometheus.Collector: the gauges refilled from the caches.
func (m *cordonMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.since.Reset()
	m.slotLimit.Reset()
	if m.ctl.elected.Load() { // the caches are synced before the metrics are served
		for _, h := range plan.HeldCordons(m.ctl.cordons(), protocol.CordonOwner, m.ctl.opts.Namespace) {
			m.since.WithLabelValues(h.Channel, h.Node).Set(float64(h.Since.UnixNano()) / 1e9)
		}
		list, _ := m.ctl.channels.UpdateChannels(m.ctl.opts.Namespace).List(labels.Everything()) // a cache: no error
		for _, c := range list {
			if s, invalid := plan.Resolve(c.Spec); invalid == nil {
				m.slotLimit.WithLabelValues(c.Name).Set(plan.MaxSlotAge(s).Seconds())
			}
		}
	}
	m.since.Collect(ch)
	m.slotLimit.Collect(ch)
}

// cordons is what the controller's Node cache says of slipway's cordons.
func (ctl *Controller) cordons() []plan.Cordon {
	var out []plan.Cordon
	for _, o := range ctl.nodes.List() {
		if m, ok := nodeMeta(o); ok && drain.CordonedBy(m.Annotations) != "" {
			out = append(out, plan.Cordon{Node: m.Name, Owner: drain.CordonedBy(m.Annotations),
				For: m.Annotations[protocol.AnnotationCordonedFor], Since: m.Annotations[protocol.AnnotationDrainStarted]})
		}
	}
	return out
}

package benchside

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// WatchTraffic is what the apiserver sent on watches, by resource
// ("group/resource", "" group for the core one), from its
// apiserver_watch_events_total and apiserver_watch_events_sizes metrics: the
// bytes are the encoded events before any compression of the connection.
type WatchTraffic map[string]WatchSent

// WatchSent is the events and bytes sent for one resource.
type WatchSent struct {
	Events, Bytes float64
}

// ScrapeWatch reads the apiserver's watch counters now.
func ScrapeWatch(ctx context.Context, c kubernetes.Interface) (WatchTraffic, error) {
	body, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the apiserver's /metrics: %w", err)
	}
	return ParseWatch(body)
}

// ParseWatch reads the watch counters from a /metrics body (for a caller
// that reads /metrics once for several counters).
func ParseWatch(body []byte) (WatchTraffic, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse the apiserver's /metrics: %w", err)
	}
	out := WatchTraffic{}
	key := func(labels map[string]string) string { return labels["group"] + "/" + labels["resource"] }
	if fam := families["apiserver_watch_events_sizes"]; fam != nil {
		for _, m := range fam.GetMetric() {
			k := key(labelMap(m.GetLabel()))
			s := out[k]
			s.Bytes += m.GetHistogram().GetSampleSum()
			out[k] = s
		}
	}
	if fam := families["apiserver_watch_events_total"]; fam != nil {
		for _, m := range fam.GetMetric() {
			k := key(labelMap(m.GetLabel()))
			s := out[k]
			s.Events += m.GetCounter().GetValue()
			out[k] = s
		}
	}
	return out, nil
}

func labelMap[L interface {
	GetName() string
	GetValue() string
}](ls []L) map[string]string {
	m := make(map[string]string, len(ls))
	for _, l := range ls {
		m[l.GetName()] = l.GetValue()
	}
	return m
}

// Since is what was sent between before and w.
func (w WatchTraffic) Since(before WatchTraffic) WatchTraffic {
	out := WatchTraffic{}
	for k, s := range w {
		b := before[k]
		if d := (WatchSent{s.Events - b.Events, s.Bytes - b.Bytes}); d.Events > 0 || d.Bytes > 0 {
			out[k] = d
		}
	}
	return out
}

// Total sums every resource.
func (w WatchTraffic) Total() WatchSent {
	var t WatchSent
	for _, s := range w {
		t.Events, t.Bytes = t.Events+s.Events, t.Bytes+s.Bytes
	}
	return t
}

// String lists the resources by bytes sent, largest first, in MiB.
func (w WatchTraffic) String() string {
	keys := make([]string, 0, len(w))
	for k := range w {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return int(w[b].Bytes - w[a].Bytes) })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f MiB in %.0f events", strings.TrimPrefix(k, "/"), w[k].Bytes/(1<<20), w[k].Events))
	}
	return strings.Join(parts, ", ")
}

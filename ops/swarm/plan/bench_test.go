package plan

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"testing"
	"time"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
)

// BenchmarkLargePool is the controller's work for the benchmark's size,
// 100,000 jobs over 1,000 workers, from nothing: the decision, the record
// (config.yml, gzipped as the controller stores it past 768 KiB) and each
// worker's share annotation. It reports the bytes each write carries.
func BenchmarkLargePool(b *testing.B) {
	in := Input{Settled: true, StableNames: true, Refresh: swarmv1.RefreshReload, MaxUnavailable: 1,
		RestartTimeout: time.Minute, Now: now}
	for i := range 100_000 {
		in.Jobs = append(in.Jobs, fmt.Sprintf("stream-%06d", i))
	}
	for i := range 1000 {
		in.Pods = append(in.Pods, ready(fmt.Sprintf("swarm-worker-%d", i), NoneApplied))
	}
	b.ReportAllocs()
	var record, gz, shareMax, shares int
	for b.Loop() {
		d, err := Decide(in)
		if err != nil {
			b.Fatal(err)
		}
		text, err := d.Config.Render()
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write([]byte(text))
		_ = zw.Close()
		record, gz, shares, shareMax = len(text), buf.Len(), 0, 0
		for w := range d.Config.Workloads {
			s, err := d.Config.ShareOf(w).Render()
			if err != nil {
				b.Fatal(err)
			}
			shares += len(s)
			shareMax = max(shareMax, len(s))
		}
	}
	b.ReportMetric(float64(record), "record-bytes")
	b.ReportMetric(float64(gz), "record-gz-bytes")
	b.ReportMetric(float64(shareMax), "share-max-bytes")
	b.ReportMetric(float64(shares), "shares-total-bytes")
}

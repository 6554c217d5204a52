package benchside

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       time.Duration
		err        bool
	}{
		{"plain", "42 (slipway) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 0 0", 3 * time.Second, false},
		{"spaces and parens in the name", "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 8 0 100 0 0", 100 * time.Millisecond, false},
		{"truncated", "42 (x) S 1 2", 0, true},
		{"no name", "42 x S", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatCPU(tc.stat)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("parseStatCPU = %v, %v; want %v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestTrackerSeesItself(t *testing.T) {
	self := os.Getpid()
	tr := Track(func() []int { return []int{self} }, 10*time.Millisecond)
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); { // burn some CPU
	}
	tr.Stop()
	u := tr.Usage()
	if u.Processes != 1 || u.PeakRSS <= 0 || u.CPU < 0 {
		t.Errorf("usage of this process = %+v, want one process with memory", u)
	}
}

func TestLine(t *testing.T) {
	r := Result{Contender: "suc", Shape: "noop", Nodes: 10, Wall: 1500 * time.Millisecond, Own: 16.1,
		Writes: map[string]float64{"jobs": 7, "controller": 9.1}, Load: "1.0 2.0 3.0", Settings: "concurrency 10",
		JobController: Pace{Writes: 70, Seconds: 2, AtLimit: 1, Limit: 20}, Machine: MachineCPU{Busy: 0.25, Saturated: 1500 * time.Millisecond},
		Watch: WatchTraffic{"ops.slipway.dev/updatechannels": {Events: 3, Bytes: 1 << 20}, "/nodes": {Events: 1, Bytes: 1 << 19}, "/secrets": {Events: 1, Bytes: 10}}}
	l := r.Line()
	for _, want := range []string{"SIDE contender=suc shape=noop nodes=10 wall_s=1.50 ", "writes_controller_per_node=9.10 writes_jobs_per_node=7.00",
		"load=1.0/2.0/3.0", "settings=concurrency_10", "jobctl_writes_events=70 jobctl_at_limit_s=1 jobctl_limit_per_s=20 machine_saturated_s=1.50 machine_busy_share=0.25 load=", "watch_mib=1.50 watch_events=5 watchres_nodes_mib=0.5000 watchres_ops.slipway.dev.updatechannels_mib=1.0000 writes_"} {
		if !strings.Contains(l, want) {
			t.Errorf("line %q lacks %q", l, want)
		}
	}
	if strings.Count(l, " ") != len(strings.Fields(l))-1 {
		t.Errorf("line %q has a value with a space", l)
	}
}

func TestMedian(t *testing.T) {
	if m := Median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median = %v, want 2", m)
	}
	if m := Median[int](nil); m != 0 {
		t.Errorf("median of nothing = %v, want 0", m)
	}
}

func TestParseWatch(t *testing.T) {
	before := []byte(`# TYPE apiserver_watch_events_sizes histogram
apiserver_watch_events_sizes_bucket{group="ops.slipway.dev",resource="updatechannels",version="v1",le="1024"} 1
apiserver_watch_events_sizes_bucket{group="ops.slipway.dev",resource="updatechannels",version="v1",le="+Inf"} 2
apiserver_watch_events_sizes_sum{group="ops.slipway.dev",resource="updatechannels",version="v1"} 3000
apiserver_watch_events_sizes_count{group="ops.slipway.dev",resource="updatechannels",version="v1"} 2
# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{group="ops.slipway.dev",resource="updatechannels",version="v1"} 2
apiserver_watch_events_total{group="",resource="nodes",version="v1"} 5
`)
	after := bytes.ReplaceAll(bytes.ReplaceAll(before, []byte("} 3000"), []byte("} 7000")), []byte(`version="v1"} 5`), []byte(`version="v1"} 9`))
	b, err := ParseWatch(before)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseWatch(after)
	if err != nil {
		t.Fatal(err)
	}
	d := a.Since(b)
	if got := d["ops.slipway.dev/updatechannels"]; got.Bytes != 4000 || got.Events != 0 {
		t.Errorf("updatechannels sent %+v, want 4000 bytes and no new event", got)
	}
	if got := d["/nodes"]; got.Events != 4 {
		t.Errorf("nodes sent %+v, want 4 events", got)
	}
	if tot := d.Total(); tot.Bytes != 4000 || tot.Events != 4 {
		t.Errorf("total %+v", tot)
	}
	if s := d.String(); !strings.HasPrefix(s, "ops.slipway.dev/updatechannels 0.00 MiB") {
		t.Errorf("String() = %q", s)
	}
}

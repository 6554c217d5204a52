package controller

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/swarm/assign"
	"slipway.dev/slipway/ops/swarm/config"
)

// TestRecordRoundTrip: the last valid spec, stored by reference to the
// config beside it, reads back as it was written.
func TestRecordRoundTrip(t *testing.T) {
	sel := metav1.LabelSelector{MatchLabels: map[string]string{"app": "w"}}
	cfg := config.Config{Version: 7, Workloads: map[string]config.Workload{
		"w-0": {Jobs: []string{"a", "c"}, Version: 7},
		"w-1": {Jobs: []string{"b", "gone"}, Version: 6, Releasing: []string{"x"}},
	}}
	for _, tc := range []struct {
		name string
		spec validSpec
	}{
		{"the config's jobs", validSpec{Jobs: []string{"c", "b", "a", "gone"}, Workers: sel}},
		{"jobs unassigned or held back", validSpec{Jobs: []string{"a", "b", "c", "gone", "new", "x"}, Dedicated: []string{"new"}, Workers: sel}},
		{"jobs dropped whose handover is not over", validSpec{Jobs: []string{"a", "b"}, Workers: sel}},
		{"no job", validSpec{Workers: sel}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := &corev1.ConfigMap{}
			if err := (stored{cfg: cfg, valid: &tc.spec}).fill(cm); err != nil {
				t.Fatal(err)
			}
			rec := readRecord(cm)
			if rec.parseErr != nil || !tc.spec.equal(rec.valid) {
				t.Fatalf("read back %+v (%v), want %+v", rec.valid, rec.parseErr, tc.spec)
			}
		})
	}
	t.Run("a record of the earlier form", func(t *testing.T) {
		cm := &corev1.ConfigMap{}
		if err := (stored{cfg: cfg}).fill(cm); err != nil {
			t.Fatal(err)
		}
		old := validSpec{Jobs: []string{"z", "a"}, Workers: sel}
		var err error
		if cm.BinaryData[LastValidKey], err = gzipJSON(old); err != nil {
			t.Fatal(err)
		}
		if rec := readRecord(cm); !old.equal(rec.valid) {
			t.Fatalf("read back %+v, want %+v", rec.valid, old)
		}
	})
	t.Run("a list that does not match its digest is no last valid spec", func(t *testing.T) {
		cm := &corev1.ConfigMap{}
		if err := (stored{cfg: cfg, valid: &validSpec{Jobs: []string{"a", "b", "c", "gone"}, Workers: sel}}).fill(cm); err != nil {
			t.Fatal(err)
		}
		other := cfg
		other.Workloads = map[string]config.Workload{"w-0": {Jobs: []string{"a"}}}
		if err := (stored{cfg: other}).fill(cm); err != nil { // config.yml replaced, last-valid kept
			t.Fatal(err)
		}
		if rec := readRecord(cm); rec.valid != nil {
			t.Fatalf("read back %+v from a config that lost jobs", rec.valid)
		}
	})
}

// realisticJobs returns n distinct job names of 45 characters shaped like
// real stream names: a region, a site, a camera id of 16 random hex digits
// and a kind ("eu-west-3/site-0412/cam-7f3a9c21d04e6b18-rtsp").
func realisticJobs(n int) []string {
	r := rand.New(rand.NewPCG(42, 45))
	regions := []string{"eu-west-1", "eu-west-3", "us-east-1", "us-west-2", "ap-south-1", "sa-east-1"}
	kinds := []string{"rtsp", "hls0", "srt0", "webr"}
	out := make([]string, 0, n)
	for len(out) < n {
		name := fmt.Sprintf("%s/site-%04d/cam-%016x-%s", regions[r.IntN(len(regions))], r.IntN(2000), r.Uint64(), kinds[r.IntN(len(kinds))])
		name = (name + "-xxxxxxxx")[:45]
		out = append(out, name)
	}
	return out
}

// recordBytes is the size the API server weighs a ConfigMap by: every key
// and value of data and binaryData (at most 1 MiB).
func recordBytes(cm *corev1.ConfigMap) int {
	n := 0
	for k, v := range cm.Data {
		n += len(k) + len(v)
	}
	for k, v := range cm.BinaryData {
		n += len(k) + len(v)
	}
	return n
}

// recordFor is the workers' ConfigMap of jobs assigned over workers from
// nothing, with jobs as the last valid spec.
func recordFor(t testing.TB, jobs, workers []string) *corev1.ConfigMap {
	res, err := assign.Assign(assign.Input{Jobs: jobs, Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{Version: 1, Workloads: map[string]config.Workload{}}
	for w, js := range res.Assignments {
		cfg.Workloads[w] = config.Workload{Jobs: js, Version: 1}
	}
	cm := &corev1.ConfigMap{}
	if err := (stored{cfg: cfg, valid: &validSpec{Jobs: jobs}}).fill(cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

// maxConfigMapBytes is the API server's cap on a ConfigMap's data.
const maxConfigMapBytes = 1 << 20

// recordCeilingJobs is the most jobs of 45 characters (realisticJobs) the
// record of a 1,000-worker Swarm holds under the cap, as measured by
// TestRecordCeiling (-v prints it), and as the TooLarge message says.
const recordCeilingJobs = RecordCeilingJobs

// TestRecordCeiling: with realistic 45-character names the record holds
// recordCeilingJobs jobs (the job list stored once); it finds and logs the
// exact ceiling.
func TestRecordCeiling(t *testing.T) {
	workers := slices.Sorted(slices.Values(names("swarm-worker-", 1000)))
	all := realisticJobs(400_000)
	fits := func(n int) (bool, int) {
		size := recordBytes(recordFor(t, all[:n], workers))
		return size <= maxConfigMapBytes, size
	}
	if ok, size := fits(recordCeilingJobs); !ok {
		t.Fatalf("%d jobs of 45 characters make a record of %d bytes, over the API server's %d", recordCeilingJobs, size, maxConfigMapBytes)
	}
	lo, hi := recordCeilingJobs, len(all)
	for hi-lo > 500 {
		mid := (lo + hi) / 2
		if ok, _ := fits(mid); ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	_, size := fits(lo)
	t.Logf("ceiling with 45-character names over 1,000 workers: about %d jobs (%d bytes)", lo, size)
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// TestTooLargeRecordMessage: a refused record says so, how many jobs it
// holds, and what to do (adding workers does not help there).
func TestTooLargeRecordMessage(t *testing.T) {
	msg := (&tooLarge{err: fmt.Errorf("ConfigMap is too long"), record: true, jobs: 80_000}).message()
	for _, want := range []string{"workers' ConfigMap", "80000 jobs", "no worker is given a new share", "74000", "split the jobs"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	if msg := (&tooLarge{err: fmt.Errorf("too long")}).message(); !strings.Contains(msg, "add workers") {
		t.Errorf("a refused share's message %q does not say to add workers", msg)
	}
}

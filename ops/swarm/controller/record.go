package controller

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/config"
)

// LastValidKey is the workers' ConfigMap key (binaryData, gzip-compressed
// JSON) holding the last valid spec: what the controller acts on while the
// Swarm's own spec is invalid, so an invalid edit made during a handover
// leaves the last valid assignment whole. Its job list is stored by
// reference to the config beside it (see recordedSpec).
const LastValidKey = "last-valid.json.gz"

// ConfigGzKey holds the whole config, gzip-compressed, when config.yml
// would make the ConfigMap larger than InlineLimit; config.yml then holds a
// stub without any share (a worker of an earlier version that still mounts
// it drops its jobs rather than run a stale share).
const ConfigGzKey = swarmv1.ConfigMapKey + ".gz"

// InlineLimit is the most config.yml may weigh in the ConfigMap (whose
// whole data the API server caps at 1 MiB).
const InlineLimit = 768 << 10

// validSpec is what of a Swarm's spec the assignment reads, once checked.
type validSpec struct {
	Jobs      []string             `json:"jobs"`
	Dedicated []string             `json:"dedicated,omitempty"`
	Workers   metav1.LabelSelector `json:"workers"`
}

// equal tells whether v and o assign alike: the same jobs in any order, the
// same dedicated jobs and worker selector.
func (v *validSpec) equal(o *validSpec) bool {
	return v != nil && o != nil && len(v.Jobs) == len(o.Jobs) && slices.Equal(sortedJobs(v.Jobs), sortedJobs(o.Jobs)) &&
		slices.Equal(v.Dedicated, o.Dedicated) && fmt.Sprint(v.Workers) == fmt.Sprint(o.Workers)
}

func sortedJobs(jobs []string) []string {
	if slices.IsSorted(jobs) {
		return jobs
	}
	return slices.Sorted(slices.Values(jobs))
}

// recordedSpec is the last valid spec as the record stores it. The job list
// is not stored again beside the config, which already lists nearly every
// job: only the jobs the spec has and the config's shares do not (Added:
// unassigned, held back) and the other way round (Removed: jobs the spec
// dropped whose handover is not finished), with the SHA-256 of the whole
// sorted list to check the rebuilt one. Jobs holds the whole list in a
// record written before this form (read, never written).
type recordedSpec struct {
	Jobs       []string             `json:"jobs,omitempty"`
	Added      []string             `json:"jobsAdded,omitempty"`
	Removed    []string             `json:"jobsRemoved,omitempty"`
	JobsSHA256 string               `json:"jobsSHA256,omitempty"`
	Dedicated  []string             `json:"dedicated,omitempty"`
	Workers    metav1.LabelSelector `json:"workers"`
}

// configJobs lists, sorted, the jobs of cfg's shares.
func configJobs(cfg config.Config) []string {
	var out []string
	for _, w := range cfg.Workloads {
		out = append(out, w.Jobs...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// jobsDigest is the SHA-256 of a sorted job list, one name a line.
func jobsDigest(sorted []string) string {
	h := sha256.New()
	for _, j := range sorted {
		h.Write([]byte(j))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// recordSpec is v in its stored form beside cfg.
func recordSpec(v *validSpec, cfg config.Config) recordedSpec {
	jobs, inCfg := sortedJobs(v.Jobs), configJobs(cfg)
	r := recordedSpec{JobsSHA256: jobsDigest(jobs), Dedicated: v.Dedicated, Workers: v.Workers}
	for _, j := range jobs {
		if _, ok := slices.BinarySearch(inCfg, j); !ok {
			r.Added = append(r.Added, j)
		}
	}
	for _, j := range inCfg {
		if _, ok := slices.BinarySearch(jobs, j); !ok {
			r.Removed = append(r.Removed, j)
		}
	}
	return r
}

// spec rebuilds the last valid spec from its stored form and the config
// stored with it; nil when the rebuilt list does not match its digest.
func (r recordedSpec) spec(cfg config.Config) *validSpec {
	if r.Jobs != nil || r.JobsSHA256 == "" {
		return &validSpec{Jobs: r.Jobs, Dedicated: r.Dedicated, Workers: r.Workers}
	}
	removed := slices.Sorted(slices.Values(r.Removed))
	jobs := slices.DeleteFunc(configJobs(cfg), func(j string) bool {
		_, ok := slices.BinarySearch(removed, j)
		return ok
	})
	jobs = append(jobs, r.Added...)
	slices.Sort(jobs)
	if jobsDigest(jobs) != r.JobsSHA256 {
		return nil
	}
	return &validSpec{Jobs: jobs, Dedicated: r.Dedicated, Workers: r.Workers}
}

// stored is what the workers' ConfigMap holds: the config in force and the
// last valid spec (nil before the first).
type stored struct {
	cfg   config.Config
	valid *validSpec
	// parseErr says why config.yml could not be read (it is rebuilt).
	parseErr error
}

// readRecord reads the workers' ConfigMap (nil: none yet).
func readRecord(cm *corev1.ConfigMap) stored {
	rec := stored{cfg: config.Config{Workloads: map[string]config.Workload{}}}
	if cm == nil {
		return rec
	}
	text := cm.Data[swarmv1.ConfigMapKey]
	if b, ok := cm.BinaryData[ConfigGzKey]; ok {
		var err error
		if text, err = gunzip(b); err != nil {
			rec.parseErr = fmt.Errorf("read %s: %w", ConfigGzKey, err)
			return rec
		}
	}
	if cfg, err := config.Parse(text); err != nil {
		rec.parseErr = err
	} else {
		rec.cfg = cfg
	}
	if b, ok := cm.BinaryData[LastValidKey]; ok && rec.parseErr == nil {
		var r recordedSpec
		if err := gunzipJSON(b, &r); err == nil {
			rec.valid = r.spec(rec.cfg)
		}
	}
	return rec
}

// fill writes rec into cm's keys.
func (rec stored) fill(cm *corev1.ConfigMap) error {
	text, err := rec.cfg.Render()
	if err != nil {
		return err
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	if cm.BinaryData == nil {
		cm.BinaryData = map[string][]byte{}
	}
	delete(cm.BinaryData, ConfigGzKey)
	cm.Data[swarmv1.ConfigMapKey] = text
	if len(text) > InlineLimit {
		cm.Data[swarmv1.ConfigMapKey] = fmt.Sprintf("# the assignment is in %s; each worker reads its share from its pod's %s annotation\nversion: %d\nworkloads: {}\n",
			ConfigGzKey, config.ShareAnnotation, rec.cfg.Version)
		if cm.BinaryData[ConfigGzKey], err = gzipBytes([]byte(text)); err != nil {
			return fmt.Errorf("compress the workers' config: %w", err)
		}
	}
	if rec.valid == nil {
		return nil
	}
	b, err := gzipJSON(recordSpec(rec.valid, rec.cfg))
	if err != nil {
		return fmt.Errorf("record the last valid spec: %w", err)
	}
	cm.BinaryData[LastValidKey] = b
	return nil
}

func gzipJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return gzipBytes(b)
}

func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func gunzip(b []byte) (string, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	defer zr.Close()
	data, err := io.ReadAll(zr)
	return string(data), err
}

func gunzipJSON(b []byte, v any) error {
	text, err := gunzip(b)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(text), v)
}

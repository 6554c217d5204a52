package controller

import (
	"bytes"
	"compress/gzip"
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
// leaves the last valid assignment whole.
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

func (v *validSpec) equal(o *validSpec) bool {
	return v != nil && o != nil && slices.Equal(v.Jobs, o.Jobs) && slices.Equal(v.Dedicated, o.Dedicated) &&
		fmt.Sprint(v.Workers) == fmt.Sprint(o.Workers)
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
	if b, ok := cm.BinaryData[LastValidKey]; ok {
		var v validSpec
		if err := gunzipJSON(b, &v); err == nil {
			rec.valid = &v
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
	b, err := gzipJSON(rec.valid)
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

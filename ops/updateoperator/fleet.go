package updateoperator

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/kube"
)

// Fleet is the rollout's state that gates every node: when the last
// update ended (finished or failed: the pause counts from it) and which
// releases failed on which nodes (the brake). Only the controller writes
// it, in a ConfigMap of its namespace (FleetStateName): a node can write
// its own Node's annotations (its agent, its kubelet), so no value a
// node writes may pause, hold or release the fleet.
type Fleet struct {
	// LastDone is when the last update ended, a success or a failure.
	LastDone time.Time `json:"lastDone,omitzero"`
	// Failed lists, by target version, the nodes whose update to it
	// failed (a node once per failure).
	Failed map[string][]string `json:"failed,omitempty"`
	// HaltAfter is the controller's --halt-after when it wrote the state
	// (for `status`).
	HaltAfter int `json:"haltAfter,omitempty"`
	// Wave: the nodes whose updates finished since the analysis last
	// passed (analysis.go), the version they run and when their bake ends
	// (no node starts before it); AnalysisFailed: the analysis failed on a
	// wave, and no node starts until an admin resumes.
	Wave           []string         `json:"wave,omitempty"`
	WaveVersion    string           `json:"waveVersion,omitempty"`
	BakeUntil      time.Time        `json:"bakeUntil,omitzero"`
	AnalysisFailed *AnalysisFailure `json:"analysisFailed,omitempty"`
	// AnalysisHold, this turn's only (never written), is why the analysis
	// lets no node start.
	AnalysisHold string `json:"-"`
}

// Halted are the versions the brake holds under p, sorted: each failed
// on at least p.HaltAfter different nodes (none when HaltAfter is 0). A
// node's failures count once: whether its update failed is the node's own
// report (its agent's, its kubelet's), so one node failing again and again
// must not halt a release for every other node.
func (f Fleet) Halted(p Policy) []string {
	if p.HaltAfter <= 0 {
		return nil
	}
	var out []string
	for v, nodes := range f.Failed {
		if distinct(nodes) >= p.HaltAfter {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// distinct is how many different names nodes holds.
func distinct(nodes []string) int {
	seen := map[string]bool{}
	for _, n := range nodes {
		seen[n] = true
	}
	return len(seen)
}

// HaltReason says why no node starts an update to version v, and what
// ends it.
func (f Fleet) HaltReason(v string, p Policy) string {
	return fmt.Sprintf("rollout of %s halted: it failed %d times on %d nodes (%s; --halt-after %d): no node starts it until a new release is offered or an admin resumes it (`slipway update-operator resume`)",
		v, len(f.Failed[v]), distinct(f.Failed[v]), strings.Join(f.Failed[v], ", "), p.HaltAfter)
}

// FleetStateName is the name of the ConfigMap holding the Fleet state of
// the controller of prefix.
func FleetStateName(prefix string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return "slipway-update-operator-state." + prefix
}

// Keys of the fleet state ConfigMap: its data key, and the annotation an
// admin sets (any value) to lift the brake.
const (
	fleetDataKey = "fleet"
	KeyResume    = "resume"
)

// fleetState is the controller's copy of the Fleet and its ConfigMap.
type fleetState struct {
	mu        sync.Mutex
	f         Fleet
	kube      *kube.Clientset
	namespace string
	name      string
	resume    string // the full key of the resume annotation
	loaded    bool
	lastRead  time.Time
	// nodes is the controller's record of its keys on each Node
	// (record.go), recorded whether it exists yet; wmu orders its writes;
	// logf reports a failed undo; unsure, the nodes whose record in the
	// ConfigMap is not known (record_lost.go).
	nodes    map[string]map[string]string
	recorded bool
	unsure   map[string]bool
	wmu      sync.Mutex
	logf     func(what, node string, err error)
}

// get returns a copy of the state.
func (s *fleetState) get() Fleet {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := Fleet{LastDone: s.f.LastDone, HaltAfter: s.f.HaltAfter, Failed: map[string][]string{},
		Wave: append([]string(nil), s.f.Wave...), WaveVersion: s.f.WaveVersion, BakeUntil: s.f.BakeUntil}
	if s.f.AnalysisFailed != nil {
		a := *s.f.AnalysisFailed
		a.Nodes = append([]string(nil), a.Nodes...)
		f.AnalysisFailed = &a
	}
	for v, n := range s.f.Failed {
		f.Failed[v] = append([]string(nil), n...)
	}
	return f
}

// load reads the ConfigMap (creating it when missing) into the state.
func (s *fleetState) load(ctx context.Context) error {
	cm, err := s.kube.CoreV1().ConfigMaps(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = s.kube.CoreV1().ConfigMaps(s.namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace,
			Labels: appLabels(ControllerComponent)}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cm, err = s.kube.CoreV1().ConfigMaps(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("read the fleet state (ConfigMap %s/%s): %w", s.namespace, s.name, err)
	}
	var f Fleet
	if d := cm.Data[fleetDataKey]; d != "" {
		if err := json.Unmarshal([]byte(d), &f); err != nil {
			return fmt.Errorf("the fleet state (ConfigMap %s/%s, key %s) is not its JSON: %w", s.namespace, s.name, fleetDataKey, err)
		}
	}
	nodes, recorded, err := parseRecords(cm.Data)
	if err != nil {
		return fmt.Errorf("the fleet state (ConfigMap %s/%s): %w", s.namespace, s.name, err)
	}
	s.mu.Lock()
	s.f, s.loaded, s.lastRead = f, true, time.Now()
	s.nodes, s.recorded = nodes, recorded
	s.mu.Unlock()
	return nil
}

// resumeAsked reads the ConfigMap (at most once per every, and only while
// something is halted) and reports whether an admin asked to resume.
func (s *fleetState) resumeAsked(ctx context.Context, every time.Duration) (bool, error) {
	s.mu.Lock()
	due := time.Since(s.lastRead) >= every
	if due {
		s.lastRead = time.Now()
	}
	s.mu.Unlock()
	if !due {
		return false, nil
	}
	cm, err := s.kube.CoreV1().ConfigMaps(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("read the fleet state (ConfigMap %s/%s): %w", s.namespace, s.name, err)
	}
	return cm.Annotations[s.resume] != "", nil
}

// update changes the state and writes it (with extra annotations: nil
// removes one).
func (s *fleetState) update(ctx context.Context, change func(*Fleet), annotations map[string]any) error {
	s.mu.Lock()
	change(&s.f)
	data, err := json.Marshal(s.f)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	meta := map[string]any{}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	patch, _ := json.Marshal(map[string]any{"metadata": meta, "data": map[string]string{fleetDataKey: string(data)}})
	if _, err := s.kube.CoreV1().ConfigMaps(s.namespace).Patch(ctx, s.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("write the fleet state (ConfigMap %s/%s): %w", s.namespace, s.name, err)
	}
	return nil
}

// Resume asks the controller of prefix in namespace to lift its brake
// (`slipway update-operator resume`).
func Resume(ctx context.Context, c *kube.Clientset, namespace, prefix string) error {
	keys, err := NewKeys(prefix)
	if err != nil {
		return err
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{keys.Key(KeyResume): stamp(wallclock.Now())}}})
	name := FleetStateName(keys.Prefix)
	if _, err := c.CoreV1().ConfigMaps(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("ask the controller to resume (annotate ConfigMap %s/%s): %w", namespace, name, err)
	}
	return nil
}

// clampNow is t, or now when t is later: a time a node wrote cannot hold
// anything past the present.
func clampNow(t, now time.Time) time.Time {
	if t.After(now) {
		return now
	}
	return t
}

// ended records in the fleet state that v's update ended (the pause
// counts from now) and, for a failure of the release on the host, that
// it failed on its target version; a success (ok) joins the wave the
// analysis judges next.
func (c *controller) ended(ctx context.Context, v NodeView, target string, release, ok bool) {
	now := wallclock.Now()
	err := c.fleet.update(ctx, func(f *Fleet) {
		f.LastDone, f.HaltAfter = now, c.o.Policy.HaltAfter
		if ok {
			c.joinWave(f, v, now)
		}
		if release && target != "" {
			if f.Failed == nil {
				f.Failed = map[string][]string{}
			}
			f.Failed[target] = append(f.Failed[target], v.Name)
		}
	}, nil)
	if err != nil {
		c.o.Log.Error("record the end of an update", "node", v.Name, "err", err)
	}
}

// brake returns the fleet state for this turn's starts: it says each
// newly halted release once (an Event on the node whose failure halted
// it, the log), lifts the brake when an admin asked to (the resume
// annotation on the state's ConfigMap) and sets the halted gauge. A new
// release is a new target: the brake holds only the versions that failed.
func (c *controller) brake(ctx context.Context) Fleet {
	f := c.fleet.get()
	halted := f.Halted(c.o.Policy)
	if len(halted) > 0 {
		asked, err := c.fleet.resumeAsked(ctx, c.o.Resync)
		if err != nil {
			c.o.Log.Error("fleet state", "err", err)
		}
		if asked {
			resume := func(f *Fleet) { // a resume lifts every halt: the brake's and a failed analysis's
				f.Failed, f.AnalysisFailed, f.Wave, f.WaveVersion, f.BakeUntil = nil, nil, nil, "", time.Time{}
			}
			if err := c.fleet.update(ctx, resume, map[string]any{c.keys.Key(KeyResume): nil}); err != nil {
				c.o.Log.Error("resume the rollout", "err", err)
			} else {
				for _, v := range halted {
					nodes := f.Failed[v]
					c.ev.emit(ctx, nodes[len(nodes)-1], corev1.EventTypeNormal, ReasonResumed, "rollout of %s resumed by an admin (its %d failures forgotten)", v, len(nodes))
				}
				c.halted = map[string]bool{}
				f = c.fleet.get()
				halted = nil
			}
		}
	}
	c.m.halted.Reset()
	now := map[string]bool{}
	for _, v := range halted {
		now[v] = true
		c.m.halted.WithLabelValues(v).Set(1)
		if c.halted[v] {
			continue
		}
		nodes := f.Failed[v]
		why := f.HaltReason(v, c.o.Policy)
		c.o.Log.Warn("rollout halted", "version", v, "failures", len(nodes))
		c.ev.emit(ctx, nodes[len(nodes)-1], corev1.EventTypeWarning, ReasonHalted, "%s", why)
	}
	c.halted = now
	return f
}

// Package heartbeat sends the fake nodes' periodic status reports: what a
// kubelet writes every nodeStatusReportFrequency (5 minutes by default)
// when its node's status has not changed, a status write that moves each
// condition's lastHeartbeatTime and nothing else.
//
// Each node's report falls at a fixed offset within the period, drawn from a
// hash of its name, so the reports of a fleet created within a minute spread
// over the period as those of kubelets started at different times do, and
// nothing another client writes moves them. (kwok's heartbeat stage, which
// this replaces, cancelled and redrew a node's pending report whenever
// anyone wrote the Node: a contender that wrote more Nodes before a
// benchmark's window drew more reports into it.)
//
// A node that is not Ready (a simulated reboot in progress) is not reported:
// the write is a JSON patch that first tests the Ready condition, and the API
// server refuses it when the test fails, writing nothing.
package heartbeat

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// DefaultPeriod is a kubelet's default nodeStatusReportFrequency.
const DefaultPeriod = 5 * time.Minute

// FieldManager is the manager the reports write as: kwok's, which writes the
// rest of a fake node's status, so that a Node keeps one status manager, as
// under one kubelet.
const FieldManager = "kwok"

// workers bound the reports in flight: at 5,000 nodes and the default
// period, about 17 a second, each a round trip of tens of milliseconds on
// a loaded machine.
const workers = 4

// Options configures Run.
type Options struct {
	Client kubernetes.Interface
	// Nodes are the nodes to report, as they are when Run starts: a
	// report names the conditions Run read then.
	Nodes []string
	// Period between a node's reports (default DefaultPeriod).
	Period time.Duration
	Log    *slog.Logger
}

// Offset is when, within each period, node's report falls: a fixed point
// from a hash of its name.
func Offset(node string, period time.Duration) time.Duration {
	h := fnv.New64a()
	_, _ = h.Write([]byte(node))
	return time.Duration(h.Sum64() % uint64(period))
}

// Run reports each node once a period, at its Offset, until ctx ends.
// It reads the nodes once, at its start, for the conditions each report
// names (a kubelet knows its own): a report is one write, no read.
func Run(ctx context.Context, opts Options) error {
	if opts.Period <= 0 {
		opts.Period = DefaultPeriod
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	conditions, err := readyConditions(ctx, opts.Client)
	if err != nil {
		return err
	}
	due := make(chan string, workers)
	defer close(due)
	for range workers {
		go func() {
			for node := range due {
				if err := Report(ctx, opts.Client, node, conditions[node], time.Now()); err != nil && ctx.Err() == nil {
					opts.Log.Debug("status heartbeat not sent", "node", node, "err", err)
				}
			}
		}()
	}
	s := newSchedule(opts.Nodes, opts.Period, time.Now())
	for {
		node, at := s.next()
		t := time.NewTimer(time.Until(at))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		select {
		case due <- node:
		case <-ctx.Done():
			return nil
		}
	}
}

// readyConditions are each node's conditions as one LIST reads them, Ready
// taken as True: the conditions a report of the node names (the report
// tests that the node is Ready when it is sent).
func readyConditions(ctx context.Context, cs kubernetes.Interface) (map[string][]corev1.NodeCondition, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("list the nodes to report: %w", err)
	}
	out := make(map[string][]corev1.NodeCondition, len(list.Items))
	for _, n := range list.Items {
		conds := slices.Clone(n.Status.Conditions)
		for i := range conds {
			if conds[i].Type == corev1.NodeReady {
				conds[i].Status = corev1.ConditionTrue
			}
		}
		out[n.Name] = conds
	}
	return out, nil
}

// schedule walks the nodes in the order of their offsets, period after period.
type schedule struct {
	period  time.Duration
	nodes   []string        // sorted by offset
	offsets []time.Duration // offsets[i] is nodes[i]'s
	cycle   time.Time       // the start of the current period
	i       int             // the next node to report
}

// newSchedule starts with the first node whose offset in the current period
// (periods counted from the Unix epoch) is still ahead of now.
func newSchedule(nodes []string, period time.Duration, now time.Time) *schedule {
	s := &schedule{period: period, nodes: slices.Clone(nodes)}
	slices.SortFunc(s.nodes, func(a, b string) int {
		return cmp.Compare(Offset(a, period), Offset(b, period))
	})
	for _, n := range s.nodes {
		s.offsets = append(s.offsets, Offset(n, period))
	}
	into := time.Duration(now.UnixNano() % int64(period))
	s.cycle = now.Add(-into)
	s.i, _ = slices.BinarySearch(s.offsets, into)
	return s
}

// next returns the next node to report and when.
func (s *schedule) next() (string, time.Time) {
	if len(s.nodes) == 0 {
		return "", time.Time{}.Add(1<<63 - 1)
	}
	if s.i == len(s.nodes) {
		s.i = 0
		s.cycle = s.cycle.Add(s.period)
	}
	n, at := s.nodes[s.i], s.cycle.Add(s.offsets[s.i])
	s.i++
	return n, at
}

// Report writes node's status heartbeat at now over its conditions as read,
// unless they show it not Ready. The API server refuses the write, and
// nothing changes, when the node turned NotReady or its conditions moved
// since the read.
func Report(ctx context.Context, cs kubernetes.Interface, node string, read []corev1.NodeCondition, now time.Time) error {
	patch, err := statusPatch(read, now)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	_, err = cs.CoreV1().Nodes().Patch(ctx, node, types.JSONPatchType, patch,
		metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if err != nil {
		return fmt.Errorf("report node %s's status: %w", node, err)
	}
	return nil
}

// jsonPatchOp is one operation of an RFC 6902 JSON patch.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// statusPatch is the JSON patch of a status heartbeat over conditions as
// read: it tests that each condition is still where it was read and that
// Ready is True, then sets every lastHeartbeatTime to now. The tests make
// the API server refuse the patch when the node has turned NotReady, or
// its conditions changed, since the read.
func statusPatch(conditions []corev1.NodeCondition, now time.Time) ([]byte, error) {
	ready := slices.IndexFunc(conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady })
	switch {
	case ready < 0:
		return nil, fmt.Errorf("no Ready condition read (a node created after the heartbeat started is not reported)")
	case conditions[ready].Status != corev1.ConditionTrue:
		return nil, fmt.Errorf("not Ready")
	}
	at := metav1.NewTime(now).Rfc3339Copy()
	ops := []jsonPatchOp{{Op: "test", Path: fmt.Sprintf("/status/conditions/%d/status", ready), Value: corev1.ConditionTrue}}
	for i, c := range conditions {
		ops = append(ops,
			jsonPatchOp{Op: "test", Path: fmt.Sprintf("/status/conditions/%d/type", i), Value: c.Type},
			jsonPatchOp{Op: "replace", Path: fmt.Sprintf("/status/conditions/%d/lastHeartbeatTime", i), Value: at})
	}
	return json.Marshal(ops)
}

package updateoperator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Nodes whose osImage matches get the interface-version label by
// themselves; an excluded node is never touched; a node an admin cordoned
// is updated and stays cordoned (only the operator's own cordon is lifted).
func TestLabelsExclusionAndAdminCordon(t *testing.T) {
	f := newFleet(t, "lbl", 3)
	bottlerocket, excluded, adminCordoned := f.nodes[0], f.nodes[1], f.nodes[2]
	data, _ := json.Marshal(map[string]any{"status": map[string]any{"nodeInfo": map[string]any{"osImage": "Bottlerocket OS 1.20.0 (aws-k8s-1.30)"}}})
	if _, err := f.kube.CoreV1().Nodes().Patch(context.Background(), bottlerocket, types.MergePatchType, data, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	f.patch(excluded, map[string]any{"metadata": map[string]any{"labels": map[string]any{f.keys.Exclude(): "true"}}})
	f.patch(adminCordoned, map[string]any{"spec": map[string]any{"unschedulable": true}})
	stop := f.controller(func(o *ControllerOptions) { o.OSImagePattern = DefaultOSImagePattern; o.Policy.MaxConcurrent = 3 })
	defer stop()
	eventually(t, 2*time.Minute, "the others updated", func() (bool, string) {
		for _, name := range []string{bottlerocket, adminCordoned} {
			v := f.keys.View(f.node(name), "")
			if got := f.version(name); got != "v2" || v.Wanted != IntentStabilize || v.State != StateUpToDate || v.CordonedByUs {
				return false, fmt.Sprintf("%s: %s %s %s", name, got, v.Wanted, v.State)
			}
		}
		return true, ""
	})
	if l := f.node(bottlerocket).Labels[f.keys.InterfaceVersion()]; l != InterfaceVersion {
		t.Errorf("the Bottlerocket node's interface-version label is %q, want %s", l, InterfaceVersion)
	}
	if l := f.node(adminCordoned).Labels[f.keys.InterfaceVersion()]; l != "" {
		t.Errorf("a node whose osImage does not match was labelled %q", l)
	}
	n := f.node(excluded)
	if w := n.Annotations[f.keys.Wanted()]; w != "" || n.Spec.Unschedulable || f.version(excluded) != "v1" {
		t.Errorf("the excluded node was touched: wanted %q, unschedulable %v, version %s", w, n.Spec.Unschedulable, f.version(excluded))
	}
	if !f.node(adminCordoned).Spec.Unschedulable {
		t.Error("the admin's cordon was lifted")
	}
}

func TestStatusTableAndMetrics(t *testing.T) {
	f := newFleet(t, "st", 0)
	addr := freeLoopback(t)
	var agentAddr atomic.Value // each start of the agent (a reboot restarts it) serves on an address of its own
	f.agentEdit = func(_ string, o *AgentOptions) { o.MetricsAddr = freeLoopback(t); agentAddr.Store(o.MetricsAddr) }
	f.addNode("st-0", false)
	stop := f.controller(func(o *ControllerOptions) { o.MetricsAddr = addr })
	defer stop()
	eventually(t, time.Minute, "updated", f.done)
	eventually(t, 10*time.Second, "the controller's metrics", metricsSay(addr,
		`slipway_update_operator_steps_total{step="finish"} 1`, `slipway_update_operator_nodes{state="up-to-date",version="v2"}`))
	// The agent that came back after the reboot: it checked for updates.
	eventually(t, 10*time.Second, "the agent's metrics", metricsSay(agentAddr.Load().(string),
		`slipway_update_operator_agent_intents_total{intent="stabilize",result="ok"}`))
	var out bytes.Buffer
	if err := Status(context.Background(), StatusOptions{Config: f.env.Config, Prefix: f.prefix, JSON: true, Out: &out}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Nodes []StatusRow `json:"nodes"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out.String())
	}
	var row *StatusRow
	for i := range got.Nodes {
		if got.Nodes[i].Node == f.nodes[0] {
			row = &got.Nodes[i]
		}
	}
	if row == nil || row.State != "up-to-date" || row.Wanted != "stabilize" || row.CurrentVersion != "v2" || row.Cordoned || row.LastTransition == "" {
		t.Errorf("status row %+v", row)
	}
	out.Reset()
	if err := Status(context.Background(), StatusOptions{Config: f.env.Config, Prefix: f.prefix, Out: &out}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "LAST TRANSITION") || !strings.Contains(out.String(), f.nodes[0]) {
		t.Errorf("status table:\n%s", out.String())
	}
}

// metricsSay: addr's /metrics holds each of want.
func metricsSay(addr string, want ...string) func() (bool, string) {
	return func() (bool, string) {
		body, err := scrape(addr)
		if err != nil {
			return false, err.Error()
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false, "no " + w + " in " + addr + "/metrics"
			}
		}
		return true, ""
	}
}

// metricValue is the value of one series (name and labels as exposed) on addr's /metrics.
func metricValue(addr, series string) (float64, bool) {
	body, err := scrape(addr)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

func scrape(addr string) (string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// FLUO-style hooks: the node is labelled before-reboot once drained and
// reboots only after the hook's annotation says true; after the reboot it
// is labelled after-reboot and finishes only after that hook says true.
// Labels and annotations are cleared at the end.
func TestBeforeAndAfterRebootHooks(t *testing.T) {
	f := newFleet(t, "hook", 1)
	node := f.nodes[0]
	const before, after = "hooks.example.com/before-ok", "hooks.example.com/after-ok"
	addr := freeLoopback(t)
	stop := f.controller(func(o *ControllerOptions) {
		o.BeforeRebootChecks, o.AfterRebootChecks = []string{before}, []string{after}
		o.MetricsAddr = addr
		o.Drain.Timeout, o.Policy.Timeouts.Reboot = 7*time.Minute, 11*time.Minute
	})
	defer stop()
	eventually(t, time.Minute, "labelled for the before-reboot hooks", func() (bool, string) {
		n := f.node(node)
		return n.Labels[f.keys.Key(KeyBeforeReboot)] == "true", "not yet"
	})
	// Held cordoned by the operator: the alert's series say since when, and for how long at most.
	cordoned := `slipway_update_operator_node_cordoned_since_timestamp_seconds{node="` + node + `"}`
	eventually(t, 10*time.Second, "the cordon's metrics", func() (bool, string) {
		want, err := time.Parse(time.RFC3339, f.node(node).Annotations[f.keys.Key(KeyDrainStarted)])
		since, ok := metricValue(addr, cordoned)
		limit, _ := metricValue(addr, "slipway_update_operator_cordon_limit_seconds")
		return err == nil && ok && since == float64(want.Unix()) && limit == (18*time.Minute).Seconds(),
			fmt.Sprintf("%s %v (%v), want the drain's start %s; limit %vs, want 1080", cordoned, since, ok, want, limit)
	})
	time.Sleep(2 * time.Second) // the controller resyncs every second: it must keep waiting
	f.mu.Lock()
	rebooted := f.reboots[node]
	f.mu.Unlock()
	if n := f.node(node); rebooted != 0 || !n.Spec.Unschedulable || n.Annotations[f.keys.Wanted()] != string(IntentPerform) {
		t.Fatalf("before the hook said yes: %d reboots, unschedulable %v, wanted %s; want a drained node waiting", rebooted, n.Spec.Unschedulable, n.Annotations[f.keys.Wanted()])
	}
	// Every state the Node passes through from the answer on, as a watch
	// shows each write: the before-reboot hook's reset and the reboot's
	// intent land in one write (a stop between two would leave a drained
	// node with neither, and its hooks would be asked again).
	beforeWrites := watchNode(t, f, node)
	f.patch(node, map[string]any{"metadata": map[string]any{"annotations": map[string]any{before: "true"}}})
	eventually(t, time.Minute, "labelled for the after-reboot hooks", func() (bool, string) {
		n := f.node(node)
		return n.Labels[f.keys.Key(KeyAfterReboot)] == "true", "not yet"
	})
	if v := f.keys.View(f.node(node), ""); v.Wanted != IntentReboot || f.version(node) != "v2" {
		t.Fatalf("after-reboot hooks started at wanted %s version %s", v.Wanted, f.version(node))
	}
	for _, m := range beforeWrites(f.node(node).ResourceVersion) {
		if m.Labels[f.keys.Key(KeyAfterReboot)] != "" {
			break // the reboot is over
		}
		labelled, wantReboot := m.Labels[f.keys.Key(KeyBeforeReboot)] != "", m.Annotations[f.keys.Wanted()] == string(IntentReboot)
		if labelled == wantReboot {
			t.Errorf("the node at resourceVersion %s: before-reboot label on %v, intent %s; want the label's reset and the reboot's intent in one write",
				m.ResourceVersion, labelled, m.Annotations[f.keys.Wanted()])
		}
	}
	// From here on, none may be finished with the after-reboot hook's
	// answer still on it (a stop right after that write would leave the
	// answer for the next update).
	afterWrites := watchNode(t, f, node)
	f.patch(node, map[string]any{"metadata": map[string]any{"annotations": map[string]any{after: "true"}}})
	eventually(t, time.Minute, "finished", f.done)
	eventually(t, 10*time.Second, "no cordon series once lifted", func() (bool, string) {
		_, held := metricValue(addr, cordoned)
		return !held, cordoned + " still exposed"
	})
	n := f.node(node)
	for _, k := range []string{f.keys.Key(KeyBeforeReboot), f.keys.Key(KeyAfterReboot)} {
		if _, ok := n.Labels[k]; ok {
			t.Errorf("label %s left on the node", k)
		}
	}
	for _, k := range []string{before, after} {
		if _, ok := n.Annotations[k]; ok {
			t.Errorf("hook annotation %s not reset", k)
		}
	}
	for _, m := range afterWrites(n.ResourceVersion) {
		if m.Annotations[f.keys.Key(KeyFinished)] != "" && m.Annotations[after] != "" {
			t.Errorf("the node was finished (resourceVersion %s) with the after-reboot hook's answer still on it", m.ResourceVersion)
		}
	}
}

// watchNode watches node from its state now; the function it returns
// gives every state the watch showed up to resourceVersion upTo.
func watchNode(t *testing.T, f *fleet, node string) func(upTo string) []*corev1.Node {
	t.Helper()
	w, err := f.kube.CoreV1().Nodes().Watch(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=" + node, ResourceVersion: f.node(node).ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return func(upTo string) []*corev1.Node {
		t.Helper()
		var seen []*corev1.Node
		for deadline := time.After(10 * time.Second); ; {
			select {
			case ev, open := <-w.ResultChan():
				if !open {
					t.Fatalf("the watch of node %s closed before its resourceVersion %s", node, upTo)
				}
				if m, ok := ev.Object.(*corev1.Node); ok {
					seen = append(seen, m)
					if m.ResourceVersion == upTo {
						return seen
					}
				}
			case <-deadline:
				t.Fatalf("the watch did not show the node's resourceVersion %s within 10 s", upTo)
				return nil
			}
		}
	}
}

// A failed attempt ends its hooks: the before-reboot label goes, and so
// does an answer one hook gave, so that the next attempt's hooks answer
// anew (a "true" left from the failed attempt would let the retry reboot
// on an answer given for another moment).
func TestFailedUpdateClearsItsHooks(t *testing.T) {
	f := newFleet(t, "hookfail", 1)
	node := f.nodes[0]
	const a, b = "hooks.example.com/a-ok", "hooks.example.com/b-ok"
	stop := f.controller(func(o *ControllerOptions) {
		o.BeforeRebootChecks = []string{a, b}
		o.Policy.Timeouts.Perform = 3 * time.Second
		o.Policy.Backoff, o.Policy.BackoffMax = 10*time.Minute, 10*time.Minute // one attempt in this test
	})
	defer stop()
	eventually(t, time.Minute, "labelled for the before-reboot hooks", func() (bool, string) {
		return f.node(node).Labels[f.keys.Key(KeyBeforeReboot)] == "true", "not yet"
	})
	f.patch(node, map[string]any{"metadata": map[string]any{"annotations": map[string]any{a: "true"}}}) // b never answers
	eventually(t, time.Minute, "the attempt failed, its hooks ended", func() (bool, string) {
		n := f.node(node)
		v := f.keys.View(n, "")
		_, labelled := n.Labels[f.keys.Key(KeyBeforeReboot)]
		_, answered := n.Annotations[a]
		return v.Failures == 1 && !labelled && !answered && !n.Spec.Unschedulable,
			fmt.Sprintf("failures %d, label left %v, %s left %v, unschedulable %v", v.Failures, labelled, a, answered, n.Spec.Unschedulable)
	})
}

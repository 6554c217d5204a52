package scale

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestRequestsSince(t *testing.T) {
	before, err := parseRequests([]byte(`# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="nodes",verb="PATCH"} 10
apiserver_request_total{code="200",resource="leases",verb="PUT"} 5
apiserver_request_total{code="200",resource="nodes",verb="WATCH"} 2
apiserver_request_total{code="200",resource="leases",verb="GET"} 1
`))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseRequests([]byte(`# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="nodes",verb="PATCH"} 14
apiserver_request_total{code="429",resource="nodes",verb="PATCH"} 1
apiserver_request_total{code="200",resource="leases",verb="PUT"} 25
apiserver_request_total{code="201",resource="jobs",verb="POST"} 3
apiserver_request_total{code="200",resource="nodes",verb="WATCH"} 3
apiserver_request_total{code="200",resource="leases",verb="GET"} 4
apiserver_request_total{code="200",resource="nodes",verb="LIST"} 1
`))
	if err != nil {
		t.Fatal(err)
	}
	w, r, wNL, rNL := after.since(before)
	if w != 28 || wNL != 8 || r != 5 || rNL != 2 {
		t.Errorf("writes %v (no Leases %v), reads %v (no Leases %v); want 28 (8), 5 (2)", w, wNL, r, rNL)
	}
}

func TestParseWatches(t *testing.T) {
	open, err := parseWatches([]byte(`# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",group="batch",resource="jobs",scope="namespace",subresource="",verb="WATCH",version="v1"} 7
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="WATCH",version="v1"} 5
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 2
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="log",verb="GET",version="v1"} 3
`))
	if err != nil {
		t.Fatal(err)
	}
	if open["*"] != 14 || open["jobs"] != 7 || open["pods"] != 7 {
		t.Errorf("watches %v; want 14 in all, 7 of jobs, 7 of pods (the log stream is no watch)", open)
	}
}

// withReady is n with a Ready condition of status st, last heartbeat at sec.
func withReady(n *corev1.Node, st corev1.ConditionStatus, sec int64) *corev1.Node {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, LastHeartbeatTime: metav1.Unix(sec, 0)}}
	return n
}

func TestWriterOf(t *testing.T) {
	at := func(sec int64) *metav1.Time { tm := metav1.Unix(sec, 0); return &tm }
	entry := func(manager, sub string, sec int64, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: sub, Time: at(sec),
			FieldsV1: metav1.NewFieldsV1(fields)}
	}
	node := func(m ...metav1.ManagedFieldsEntry) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{ManagedFields: m}}
	}
	kwok, agent := entry("kwok", "status", 10, `{"f:status":{}}`), entry("slipway", "", 10, `{"f:metadata":{}}`)
	for _, c := range []struct {
		name     string
		old, cur *corev1.Node
		want     string
	}{
		{"a status write a second later: Ready again", withReady(node(kwok, agent), corev1.ConditionFalse, 5),
			withReady(node(entry("kwok", "status", 11, `{"f:status":{}}`), agent), corev1.ConditionTrue, 11), "kwok(status)"},
		{"a status heartbeat", withReady(node(kwok, agent), corev1.ConditionTrue, 5),
			withReady(node(entry("kwok", "status", 11, `{"f:status":{}}`), agent), corev1.ConditionTrue, 11), "heartbeat"},
		{"new fields in the same second", node(kwok, agent), node(kwok, entry("slipway", "", 10, `{"f:metadata":{"f:labels":{}}}`)), "slipway"},
		{"a new manager", node(kwok), node(kwok, agent), "slipway"},
		{"two at once", node(kwok, agent), node(entry("kwok", "status", 12, `{}`), entry("slipway", "", 12, `{}`)), "kwok(status)+slipway"},
		{"nothing told apart", node(kwok, agent), node(kwok, agent), "same second: nothing seen"},
		{"a status write in the same second", node(kwok, agent), func() *corev1.Node {
			n := node(kwok, agent)
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
			return n
		}(), "same second: status"},
	} {
		if got := writerOf(c.old, c.cur); got != c.want {
			t.Errorf("%s: writerOf = %q, want %q", c.name, got, c.want)
		}
	}
	before := map[string]writerCount{"kwok(status)": {2, 100}}
	after := map[string]writerCount{"kwok(status)": {5, 400}, "same second: status": {1, 500}, "idle": {0, 0}}
	if got, want := writersSince(before, after), "same_second_status:1:500,kwok(status):3:300"; got != want {
		t.Errorf("writersSince = %q, want %q", got, want)
	}
}

func TestRolloutNodeWatchers(t *testing.T) {
	// One relist of a 5,000-node fleet in the window, 500 agents opening their Node's watch.
	got := strings.Join(rolloutNodeWatchers(73173, 7225, watchChurn{InitEvents: 5500, Terminated: 1}), " ")
	if want := "node_watch_events=73173 node_init_events=5500 node_watchers_terminated=1 node_watchers=10.1 node_watchers_steady=9.4"; got != want {
		t.Errorf("rolloutNodeWatchers = %q, want %q", got, want)
	}
	if got, want := strings.Join(rolloutNodeWatchers(12, 0, watchChurn{}), " "), "node_watch_events=12 node_init_events=0 node_watchers_terminated=0"; got != want {
		t.Errorf("rolloutNodeWatchers with no event at the watcher = %q, want %q", got, want)
	}
}

func TestParseWatchChurn(t *testing.T) {
	churn, err := parseWatchChurn([]byte(`# TYPE apiserver_init_events_total counter
apiserver_init_events_total{resource="nodes"} 5012
apiserver_init_events_total{resource="pods"} 40
apiserver_init_events_total{resource="nodes.metrics.k8s.io"} 7
# TYPE apiserver_terminated_watchers_total counter
apiserver_terminated_watchers_total{resource="nodes"} 2
apiserver_terminated_watchers_total{resource="pods"} 1
`), "nodes")
	if err != nil {
		t.Fatal(err)
	}
	if churn != (watchChurn{InitEvents: 5012, Terminated: 2}) {
		t.Errorf("churn %+v; want 5012 initial events and 2 terminated, of Nodes only", churn)
	}
	if d := churn.since(watchChurn{InitEvents: 12, Terminated: 1}); d != (watchChurn{InitEvents: 5000, Terminated: 1}) {
		t.Errorf("churn since an earlier read %+v; want 5000 initial events and 1 terminated", d)
	}
}

func TestRestNodeWatchers(t *testing.T) {
	for _, c := range []struct {
		name       string
		sent       float64
		oneWatcher int64
		want       string
	}{
		{"eight watchers", 800, 100, "rest_node_watch_events=800 rest_nodewatcher_events=100 rest_node_watchers=8.0"},
		{"no Node event in the window: no ratio", 40, 0, "rest_node_watch_events=40 rest_nodewatcher_events=0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := strings.Join(restNodeWatchers(c.sent, c.oneWatcher), " "); got != c.want {
				t.Errorf("restNodeWatchers(%v, %d) = %q, want %q", c.sent, c.oneWatcher, got, c.want)
			}
		})
	}
}

// TestContenderBytes: what a contender adds to a Node is its labels,
// annotations and managedFields entries; the simulator's reboot entries
// (manager slipway-testenv) are not the contender's.
func TestContenderBytes(t *testing.T) {
	entry := func(manager string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate}
	}
	bare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1",
		Annotations:   map[string]string{"sim.slipway.dev/down": "false"},
		ManagedFields: []metav1.ManagedFieldsEntry{entry("kube-controller-manager"), entry("slipway-testenv")}}}
	withContender := bare.DeepCopy()
	withContender.Labels = map[string]string{"plan.upgrade.cattle.io/noop": "abc"}
	withContender.ManagedFields = append(withContender.ManagedFields, entry("system-upgrade-controller"))
	tests := []struct {
		name string
		node *corev1.Node
		none bool
	}{
		{"the simulator's entries alone", bare, true},
		{"a contender's label and entry", withContender, false},
	}
	for _, tt := range tests {
		w := &nodeWatcher{store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
		if err := w.store.Add(tt.node); err != nil {
			t.Fatal(err)
		}
		if got := w.contenderBytes(); (got == 0) != tt.none {
			t.Errorf("%s: contenderBytes %v, want zero: %v", tt.name, got, tt.none)
		}
	}
}

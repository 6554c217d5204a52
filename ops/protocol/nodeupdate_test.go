package protocol

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// The annotation encodings stay as the agents and controllers of the
// previous release read and write them: View and Report are the API's
// ChannelView and SlotReport under another name, with the same JSON.
func TestAnnotationEncodingUnchanged(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	v := View{Namespace: "ops", Name: "main", Created: at, Spec: v1.UpdateChannelSpec{URL: "file:///m", Version: "v2"},
		Resolved: &v1.ResolvedRelease{Version: "v2", Source: "file:///m"},
		Slot:     &v1.Slot{Node: "n1", Version: "v2", Phase: "Upgrading", Attempt: 1, Since: at}}
	want := `{"namespace":"ops","name":"main","created":"2026-11-28T12:00:00Z","spec":{"url":"file:///m","version":"v2"},` +
		`"resolved":{"version":"v2","source":"file:///m","at":null},"slot":{"node":"n1","version":"v2","phase":"Upgrading","attempt":1,"since":"2026-11-28T12:00:00Z"}}`
	if got := v.String(); got != want {
		t.Errorf("view annotation\n got %s\nwant %s", got, want)
	}
	back, err := ParseView(want)
	if err != nil || back.String() != want {
		t.Errorf("ParseView = %s, %v; want %s", back, err, want)
	}
	r := Reports{"uid-1": {Since: at, Attempt: 1, Version: "v2", Phase: "Rebooting", Job: "j"}}
	wantR := `{"uid-1":{"since":"2026-11-28T12:00:00Z","attempt":1,"version":"v2","phase":"Rebooting","job":"j","at":null}}`
	if got := r.String(); got != wantR {
		t.Errorf("report annotation\n got %s\nwant %s", got, wantR)
	}
}

// A node's views and reports read back from a NodeUpdate as they were
// written, in UID order whatever the map's; views of another namespace's
// channels, and entries naming no channel, are not this namespace's.
func TestNodeUpdateRoundTrip(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	views := map[types.UID]View{
		"b": {Namespace: "ops", Name: "second", Spec: v1.UpdateChannelSpec{URL: "file:///m"}, Permit: &v1.StagePermit{Node: "n1", Version: "v3", Since: at}},
		"a": {Namespace: "ops", Name: "first", Spec: v1.UpdateChannelSpec{URL: "file:///m"}, Slot: &v1.Slot{Node: "n1", Version: "v2", Attempt: 2, Since: at}},
	}
	spec := SpecOf(views)
	if len(spec.Channels) != 2 || spec.Channels[0].UID != "a" || spec.Channels[1].UID != "b" {
		t.Fatalf("spec channels = %+v, want a then b", spec.Channels)
	}
	if got := ViewsOfSpec(spec, "ops"); !reflect.DeepEqual(got, views) {
		t.Errorf("ViewsOfSpec = %+v\nwant %+v", got, views)
	}
	// Through JSON as the API server stores it.
	b, err := json.Marshal(v1.NodeUpdate{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	var stored v1.NodeUpdate
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	got := ViewsOfSpec(stored.Spec, "ops")
	for uid, v := range views { // times come back in another location: compare the encodings
		if got[uid].String() != v.String() || len(got) != len(views) {
			t.Errorf("ViewsOfSpec(stored)[%s] = %s\nwant %s", uid, got[uid], v)
		}
	}
	for name, c := range map[string]struct {
		spec v1.NodeUpdateSpec
		ns   string
		want int
	}{
		"another namespace": {spec, "elsewhere", 0},
		"no name":           {v1.NodeUpdateSpec{Channels: []v1.NodeChannel{{UID: "x", ChannelView: v1.ChannelView{Namespace: "ops"}}}}, "ops", 0},
		"empty":             {v1.NodeUpdateSpec{}, "ops", 0},
	} {
		if got := ViewsOfSpec(c.spec, c.ns); len(got) != c.want {
			t.Errorf("%s: %d views, want %d", name, len(got), c.want)
		}
	}

	reports := Reports{"z": {PermitDone: &at}, "a": {Since: at, Attempt: 1, Version: "v2", Outcome: OutcomeSucceeded, At: at}}
	st := v1.NodeUpdateStatus{Reports: reports.StatusReports()}
	if len(st.Reports) != 2 || st.Reports[0].UID != "a" || st.Reports[1].UID != "z" {
		t.Fatalf("status reports = %+v, want a then z", st.Reports)
	}
	if got := ReportsOfStatus(st); !reflect.DeepEqual(got, reports) {
		t.Errorf("ReportsOfStatus = %+v\nwant %+v", got, reports)
	}
	if got := ReportsOfStatus(v1.NodeUpdateStatus{}); len(got) != 0 {
		t.Errorf("no status: %v", got)
	}
}

// The controller writes in spec.protocol the highest protocol it and the
// node's agent both speak, and nothing while the agent reads no NodeUpdate.
func TestSpecProtocol(t *testing.T) {
	for _, c := range []struct{ announced, speaks, want int }{
		{0, 3, 0}, // the first release's agent: its views stay on its Node
		{2, 3, 2}, // an agent of protocol 2: its versions stay on its Node
		{3, 3, 3},
		{3, 2, 2}, // a controller of protocol 2 reads the versions on the Node
		{4, 3, 3}, // a newer agent: what this controller speaks
	} {
		if got := SpecProtocol(c.announced, c.speaks); got != c.want {
			t.Errorf("SpecProtocol(%d, %d) = %d, want %d", c.announced, c.speaks, got, c.want)
		}
	}
}

// A node's versions are read from its NodeUpdate's status once its agent
// keeps them there (protocol 3), else from its Node's annotations, even
// where a status of protocol 2 holds booted versions (written only with
// its reports, they may be a boot behind).
func TestPublishedVersions(t *testing.T) {
	onNode := map[string]string{AnnotationRootfsVersion: "v2", AnnotationKernelVersion: "k2", AnnotationK3sVersion: "v1.33.1+k3s1",
		AnnotationBootedBootID: "boot-2", AnnotationStagedRootfsVersion: "v3"}
	fromNode := v1.NodeVersions{Rootfs: "v2", Kernel: "k2", K3s: "v1.33.1+k3s1", BootID: "boot-2"}
	old := &v1.NodeVersions{Rootfs: "v1", BootID: "boot-1"}
	for _, c := range []struct {
		name           string
		u              *v1.NodeUpdate
		booted, staged v1.NodeVersions
	}{
		{"no NodeUpdate", nil, fromNode, v1.NodeVersions{Rootfs: "v3"}},
		{"protocol 2", &v1.NodeUpdate{Status: v1.NodeUpdateStatus{Protocol: 2, Booted: old}}, fromNode, v1.NodeVersions{Rootfs: "v3"}},
		{"protocol 3", &v1.NodeUpdate{Status: v1.NodeUpdateStatus{Protocol: 3, Booted: old}}, *old, v1.NodeVersions{}},
		{"protocol 3, staged", &v1.NodeUpdate{Status: v1.NodeUpdateStatus{Protocol: 3, Booted: old, Staged: &v1.NodeVersions{Rootfs: "v4"}}},
			*old, v1.NodeVersions{Rootfs: "v4"}},
	} {
		b, s := PublishedVersions(onNode, c.u)
		if b != c.booted || s != c.staged {
			t.Errorf("%s: PublishedVersions = %+v, %+v; want %+v, %+v", c.name, b, s, c.booted, c.staged)
		}
	}
}

// mapStore is a store of objects by namespace/name key.
type mapStore map[string]any

func (m mapStore) GetByKey(key string) (any, bool, error) { o, ok := m[key]; return o, ok, nil }

// A node's NodeUpdate is found in a cache by its namespace and the node's name.
func TestNodeUpdateIn(t *testing.T) {
	u := &v1.NodeUpdate{}
	store := mapStore{"ops/n1": u, "ops/n2": "not a NodeUpdate"}
	for _, c := range []struct {
		store    Cached
		ns, node string
		want     *v1.NodeUpdate
	}{
		{store, "ops", "n1", u},
		{store, "other", "n1", nil},
		{store, "ops", "n3", nil},
		{store, "ops", "n2", nil},
		{nil, "ops", "n1", nil},
	} {
		if got := NodeUpdateIn(c.store, c.ns, c.node); got != c.want {
			t.Errorf("NodeUpdateIn(%s, %s) = %p, want %p", c.ns, c.node, got, c.want)
		}
	}
}

// A program speaks this release's protocol unless set to another it speaks.
func TestSpoken(t *testing.T) {
	for _, c := range []struct {
		set, want int
		bad       bool
	}{{0, Protocol, false}, {2, 2, false}, {3, 3, false}, {1, 0, true}, {4, 0, true}} {
		got, err := Spoken(c.set)
		if got != c.want || (err != nil) != c.bad {
			t.Errorf("Spoken(%d) = %d, %v; want %d, error %t", c.set, got, err, c.want, c.bad)
		}
	}
}

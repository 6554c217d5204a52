package crds_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	opsclient "slipway.dev/slipway/ops/generated/clientset/versioned/typed/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/testenv"
)

// channelsAPI applies the ops.slipway.dev CRDs to the test's API server
// and returns the UpdateChannels of namespace default there, with a
// context that ends with the test (a minute at most).
func channelsAPI(t *testing.T) (context.Context, opsclient.UpdateChannelInterface) {
	t.Helper()
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if err := crds.Apply(ctx, e.Config, "ops.slipway.dev"); err != nil {
		t.Fatal(err)
	}
	client, err := versioned.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, client.OpsV1().UpdateChannels("default")
}

func onFailure(spec opsv1.UpdateChannelSpec, v string) opsv1.UpdateChannelSpec {
	spec.Analysis.OnFailure = v
	return spec
}

// An analysis that says nothing of its failures halts: the API server
// defaults spec.analysis.onFailure to halt.
func TestUpdateChannelAnalysisOnFailureDefaultsToHalt(t *testing.T) {
	ctx, api := channelsAPI(t)
	ch, err := api.Create(ctx, &opsv1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{GenerateName: "onfailure-"},
		Spec: opsv1.UpdateChannelSpec{URL: "github-releases://rancher/k3os", Analysis: &opsv1.AnalysisSpec{PrometheusURL: "http://prom:9090",
			Queries: []opsv1.AnalysisQuery{{Name: "e", Query: "x", Condition: "< 1"}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ch.Spec.Analysis.OnFailure; got != opsv1.OnFailureHalt {
		t.Errorf("spec.analysis.onFailure = %q, want the default %q", got, opsv1.OnFailureHalt)
	}
}

// The CRD's CEL rules refuse, at kubectl apply, the specs no agent could act
// on, each with a message that says what to write; good specs pass.
func TestUpdateChannelSchemaRefusesBadSpecs(t *testing.T) {
	ctx, api := channelsAPI(t)
	win := func(days []string, start, end, tz string) *opsv1.Window {
		return &opsv1.Window{Days: days, Start: start, End: end, TimeZone: tz}
	}
	const gh = "github-releases://rancher/k3os"
	q := func(name, cond string) opsv1.AnalysisQuery {
		return opsv1.AnalysisQuery{Name: name, Query: "sum(rate(errors_total[2m]))", Condition: cond}
	}
	const prom = "http://prometheus.monitoring:9090"
	an := func(url string, qs ...opsv1.AnalysisQuery) opsv1.UpdateChannelSpec {
		return opsv1.UpdateChannelSpec{URL: gh, Analysis: &opsv1.AnalysisSpec{PrometheusURL: url, Queries: qs}}
	}
	cases := []struct {
		name    string
		spec    opsv1.UpdateChannelSpec
		wantErr string // "" = accepted
	}{
		{"github channel", opsv1.UpdateChannelSpec{URL: gh, Version: "v0.21.5-k3s2r1"}, ""},
		{"https channel", opsv1.UpdateChannelSpec{URL: "https://mirror.example/k3os/latest", Version: "latest"}, ""},
		{"file mirror", opsv1.UpdateChannelSpec{URL: "file:///media/k3os", Version: "v1.28.5+k3s1"}, ""},
		{"directory mirror", opsv1.UpdateChannelSpec{URL: "/media/k3os"}, ""},
		{"window", opsv1.UpdateChannelSpec{URL: gh, Window: win([]string{"Mon", "tuesday", " sat"}, "22:00", "4:30", "Europe/Berlin")}, ""},
		{"window in UTC", opsv1.UpdateChannelSpec{URL: gh, Window: win(nil, "00:00", "00:00", "")}, ""},

		{"empty url", opsv1.UpdateChannelSpec{URL: " "}, "spec.url is empty"},
		{"unknown scheme", opsv1.UpdateChannelSpec{URL: "ftp://mirror.example/k3os"}, "scheme slipway does not read"},
		{"github without repo", opsv1.UpdateChannelSpec{URL: "github-releases://rancher"}, "github-releases://owner/repo"},
		{"https without host", opsv1.UpdateChannelSpec{URL: "https:///k3os/latest"}, "needs a host"},
		{"https with query", opsv1.UpdateChannelSpec{URL: "https://mirror.example/latest?x=1"}, "no query"},
		{"version with a slash", opsv1.UpdateChannelSpec{URL: gh, Version: "v1/../../etc"}, "spec.version must be latest or one token"},
		{"version too long", opsv1.UpdateChannelSpec{URL: gh, Version: "v" + strings.Repeat("1", 128)}, "spec.version"},
		{"window start", opsv1.UpdateChannelSpec{URL: gh, Window: win(nil, "25:00", "04:00", "")}, "spec.window.start"},
		{"window end missing", opsv1.UpdateChannelSpec{URL: gh, Window: win(nil, "22:00", "", "")}, "spec.window.end"},
		{"window day", opsv1.UpdateChannelSpec{URL: gh, Window: win([]string{"mon", "someday"}, "22:00", "04:00", "")}, "spec.window.days"},
		{"unknown time zone", opsv1.UpdateChannelSpec{URL: gh, Window: win(nil, "22:00", "04:00", "Europe/Atlantis")}, "spec.window.timeZone"},

		// spec.analysis: a condition that does not parse is refused with what to write.
		{"analysis threshold", an(prom, q("errors", "< 0.05")), ""},
		{"analysis operators", an(prom, q("a", "<=1"), q("b", ">= -2.5e3"), q("c", "== 0"), q("d", "!= 1"), q("e", "> .5"), q("f", "empty"), q("g", " Empty ")), ""},
		{"analysis alerts only", opsv1.UpdateChannelSpec{URL: gh, Analysis: &opsv1.AnalysisSpec{PrometheusURL: "https://prom.example/prefix",
			Alerts: &opsv1.AlertGate{FilterRegexp: "^(Watchdog|InfoInhibitor)$", FiringOnly: true}}}, ""},
		{"analysis condition in words", an(prom, q("errors", "below 0.05")), `write "<op> <number>"`},
		{"analysis condition without a number", an(prom, q("errors", "<")), `e.g. "< 0.05"`},
		{"analysis url without scheme", an("prometheus:9090", q("errors", "< 1")), "spec.analysis.prometheusURL"},
		{"analysis asks nothing", an(prom), "spec.analysis asks nothing"},
		{"analysis name twice", an(prom, q("errors", "< 1"), q("errors", "< 2")), "a name of its own"},
		{"analysis query without name", an(prom, q(" ", "< 1")), "queries[].name is empty"},
		{"analysis bad noData", opsv1.UpdateChannelSpec{URL: gh, Analysis: &opsv1.AnalysisSpec{PrometheusURL: prom,
			Queries: []opsv1.AnalysisQuery{{Name: "e", Query: "x", Condition: "< 1", NoData: "fail"}}}}, "noData"},
		// spec.analysis.onFailure: halt or rollback, nothing else.
		{"analysis onFailure halt", onFailure(an(prom, q("e", "< 1")), "halt"), ""},
		{"analysis onFailure rollback", onFailure(an(prom, q("e", "< 1")), "rollback"), ""},
		{"analysis onFailure in capitals", onFailure(an(prom, q("e", "< 1")), "Rollback"), "spec.analysis.onFailure: write halt"},
		{"analysis onFailure unknown", onFailure(an(prom, q("e", "< 1")), "undo"), "or rollback"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obj := &opsv1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{GenerateName: "cel-"}, Spec: c.spec}
			_, err := api.Create(ctx, obj, metav1.CreateOptions{})
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("refused a good spec: %v", err)
			case c.wantErr != "" && err == nil:
				t.Errorf("accepted a bad spec, want an error containing %q", c.wantErr)
			case c.wantErr != "" && !strings.Contains(err.Error(), c.wantErr):
				t.Errorf("err = %v, want it to contain %q", err, c.wantErr)
			}
		})
	}
}

// The NodeUpdate's CEL rules refuse what no slipway writer writes: another
// node's slot or permit in a node's object, an entry without its channel,
// an outcome no reader knows.
func TestNodeUpdateSchemaRefusesBadObjects(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := crds.Apply(ctx, e.Config, "ops.slipway.dev"); err != nil {
		t.Fatal(err)
	}
	client, err := versioned.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	api := client.OpsV1().NodeUpdates("default")
	view := func(uid, name string, slotNode, permitNode string) opsv1.NodeChannel {
		c := opsv1.NodeChannel{UID: types.UID(uid), ChannelView: opsv1.ChannelView{Namespace: "default", Name: name,
			Spec: opsv1.UpdateChannelSpec{URL: "github-releases://rancher/k3os"}}}
		if slotNode != "" {
			c.Slot = &opsv1.Slot{Node: slotNode, Version: "v2", Attempt: 1}
		}
		if permitNode != "" {
			c.Permit = &opsv1.StagePermit{Node: permitNode, Version: "v2"}
		}
		return c
	}
	cases := []struct {
		name    string
		spec    []opsv1.NodeChannel
		reports []opsv1.NodeReport
		wantErr string
	}{
		{"own slot and permit", []opsv1.NodeChannel{view("u1", "main", "n-ok", ""), view("u2", "other", "", "n-ok")},
			[]opsv1.NodeReport{{UID: "u1", SlotReport: opsv1.SlotReport{Version: "v2", Phase: "Upgrading"}}}, ""},
		{"no channels", nil, nil, ""},
		{"another node's slot", []opsv1.NodeChannel{view("u1", "main", "n-other", "")}, nil, "of its own node only"},
		{"another node's permit", []opsv1.NodeChannel{view("u1", "main", "", "n-other")}, nil, "of its own node only"},
		{"entry without uid", []opsv1.NodeChannel{view("", "main", "", "")}, nil, "uid"},
		{"same channel twice", []opsv1.NodeChannel{view("u1", "main", "", ""), view("u1", "main", "", "")}, nil, "Duplicate"},
		{"report without uid", nil, []opsv1.NodeReport{{SlotReport: opsv1.SlotReport{Phase: "Upgrading"}}}, "uid"},
		{"unknown outcome", nil, []opsv1.NodeReport{{UID: "u1", SlotReport: opsv1.SlotReport{Outcome: "Maybe"}}}, "outcome must be"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			node := fmt.Sprintf("n-ok-%d", i) // "n-ok" in a case is the object's own node
			for j := range c.spec {
				if s := c.spec[j].Slot; s != nil && s.Node == "n-ok" {
					s.Node = node
				}
				if p := c.spec[j].Permit; p != nil && p.Node == "n-ok" {
					p.Node = node
				}
			}
			obj := &opsv1.NodeUpdate{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: opsv1.NodeUpdateSpec{Channels: c.spec}}
			created, err := api.Create(ctx, obj, metav1.CreateOptions{})
			if err == nil && len(c.reports) > 0 {
				created.Status.Reports = c.reports
				_, err = api.UpdateStatus(ctx, created, metav1.UpdateOptions{})
			}
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("refused a good object: %v", err)
			case c.wantErr != "" && err == nil:
				t.Errorf("accepted a bad object, want an error containing %q", c.wantErr)
			case c.wantErr != "" && !strings.Contains(err.Error(), c.wantErr):
				t.Errorf("err = %v, want it to contain %q", err, c.wantErr)
			}
		})
	}
}

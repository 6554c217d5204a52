package crds_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/testenv"
)

// The CRD refuses a spec.analysis that could not be evaluated, with a
// message saying what to write; good analyses pass, their defaults set.
func TestUpdateChannelSchemaRefusesBadAnalyses(t *testing.T) {
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
	api := client.OpsV1().UpdateChannels("default")
	q := func(name, cond string) opsv1.AnalysisQuery {
		return opsv1.AnalysisQuery{Name: name, Query: "sum(rate(errors_total[2m]))", Condition: cond}
	}
	an := func(url string, qs ...opsv1.AnalysisQuery) *opsv1.AnalysisSpec {
		return &opsv1.AnalysisSpec{PrometheusURL: url, Queries: qs}
	}
	const prom = "http://prometheus.monitoring:9090"
	cases := []struct {
		name    string
		a       *opsv1.AnalysisSpec
		wantErr string // "" = accepted
	}{
		{"threshold", an(prom, q("errors", "< 0.05")), ""},
		{"all the operators", an(prom, q("a", "<=1"), q("b", ">= -2.5e3"), q("c", "== 0"), q("d", "!= 1"), q("e", "> .5"), q("f", "empty"), q("g", " Empty ")), ""},
		{"alerts only", &opsv1.AnalysisSpec{PrometheusURL: "https://prom.example/prefix", Alerts: &opsv1.AlertGate{FilterRegexp: "^(Watchdog|InfoInhibitor)$", FiringOnly: true}}, ""},

		{"condition in words", an(prom, q("errors", "below 0.05")), `write "<op> <number>"`},
		{"condition without a number", an(prom, q("errors", "<")), `e.g. "< 0.05"`},
		{"no scheme", an("prometheus:9090", q("errors", "< 1")), "spec.analysis.prometheusURL"},
		{"nothing asked", an(prom), "spec.analysis asks nothing"},
		{"a name twice", an(prom, q("errors", "< 1"), q("errors", "< 2")), "a name of its own"},
		{"no name", an(prom, q(" ", "< 1")), "queries[].name is empty"},
		{"bad noData", &opsv1.AnalysisSpec{PrometheusURL: prom, Queries: []opsv1.AnalysisQuery{{Name: "e", Query: "x", Condition: "< 1", NoData: "fail"}}}, "noData"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obj := &opsv1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{GenerateName: "analysis-"},
				Spec: opsv1.UpdateChannelSpec{URL: "file:///media/k3os", Analysis: c.a}}
			got, err := api.Create(ctx, obj, metav1.CreateOptions{})
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("refused a good analysis: %v", err)
			case c.wantErr != "" && err == nil:
				t.Errorf("accepted a bad analysis, want an error containing %q", c.wantErr)
			case c.wantErr != "" && !strings.Contains(err.Error(), c.wantErr):
				t.Errorf("err = %v, want it to contain %q", err, c.wantErr)
			case err == nil && (got.Spec.Analysis.Interval == nil || got.Spec.Analysis.Interval.Duration != 10*time.Second):
				t.Errorf("interval not defaulted to 10s: %+v", got.Spec.Analysis.Interval)
			}
		})
	}
}

package eds

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/analysis/promtest"
	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds/plan"
)

// errorRateQuery is the stand-in workload's error rate on the canary nodes.
const errorRateQuery = `sum by (node) (rate(standin_requests_total{code="500",node=~"$nodes"}[5s])) / sum by (node) (rate(standin_requests_total{node=~"$nodes"}[5s]))`

// withAnalysis gives e's canary an analysis of the stand-in's error rate
// on the canary nodes, asked every second of Prometheus at url.
func withAnalysis(e *v1.ExtendedDaemonSet, url string) *v1.ExtendedDaemonSet {
	e.Spec.Strategy.Canary.Analysis = &v1.CanaryAnalysis{PrometheusURL: url,
		Interval: &metav1.Duration{Duration: time.Second}, Timeout: &metav1.Duration{Duration: 5 * time.Second},
		Queries: []v1.AnalysisQuery{{Name: "canary-error-rate", Query: errorRateQuery, Condition: "< 0.05"}}}
	return e
}

// podsByNode follows the images the test's pods run on each node (any pod
// bound there, running or not), for the stand-in workload's error rate.
type podsByNode struct {
	mu     sync.Mutex
	images map[string][]string
}

func (p *podsByNode) runs(node, image string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.images[node], image)
}

// follow polls the test's pods until the test ends; each poll also
// checks that no pod of image runs outside the canary nodes the status
// named (outside returns what it saw).
func (h *harness) follow(name, image string) (*podsByNode, func() (canaryNodes []string, outside []string)) {
	p := &podsByNode{images: map[string][]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	canary, bad := map[string]bool{}, []string{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			// The status first: a pod of image seen after it was named is on
			// a node the status named before or then.
			if e, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Get(ctx, name, metav1.GetOptions{}); err == nil && e.Status.Canary != nil {
				mu.Lock()
				for _, n := range e.Status.Canary.Nodes {
					canary[n] = true
				}
				mu.Unlock()
			}
			list, err := h.kube.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: v1.LabelName + "=" + name})
			if err == nil {
				images := map[string][]string{}
				mu.Lock()
				for _, pod := range list.Items {
					if pod.Spec.NodeName == "" {
						continue
					}
					img := pod.Spec.Containers[0].Image
					images[pod.Spec.NodeName] = append(images[pod.Spec.NodeName], img)
					if img == image && !canary[pod.Spec.NodeName] {
						bad = append(bad, fmt.Sprintf("pod %s of %s on %s (canary nodes %v)", pod.Name, img, pod.Spec.NodeName, keys(canary)))
					}
				}
				mu.Unlock()
				p.mu.Lock()
				p.images = images
				p.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	stop := func() ([]string, []string) {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return keys(canary), bad
	}
	h.t.Cleanup(func() { stop() })
	return p, stop
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// analysisCluster is four nodes of the test's own, a stand-in workload
// exporting each node's requests (failing ones where bad says so) and a
// real Prometheus scraping it every second.
func (h *harness) analysisCluster(bad func(node string) bool) (nodes []string, prom *promtest.Server) {
	for _, s := range []string{"a", "b", "c", "d"} {
		nodes = append(nodes, h.addNode(s))
	}
	exp := promtest.StartExporter(h.t, nodes, func(node string) float64 {
		if bad(node) {
			return 0.5
		}
		return 0
	})
	return nodes, promtest.Start(h.t, promtest.Options{Targets: []string{exp.Addr}})
}

// A release whose error rate rises on the canary node: the analysis (a
// real Prometheus scraping the stand-in workload) fails the canary, the
// template is restored, and no pod of it ever runs outside the canary node.
func TestCanaryAnalysisFailsABadRelease(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	pods, stop := h.follow("agent", "agent:v2")
	_, prom := h.analysisCluster(func(node string) bool { return pods.runs(node, "agent:v2") })
	// 20 s: long enough for the errors to show in a 5 s rate before the
	// canary could be validated; the analysis fails it, whatever the load.
	h.create(withAnalysis(withCanary(h.ownDaemon("agent", "agent:v1"), 20*time.Second), prom.URL))
	h.rolledOut("agent", "agent:v1", 4)
	h.setImage("agent", "agent:v2")
	e := h.waitState("agent", v1.StateCanaryFailed, 2*time.Minute)
	if e.Status.Reason != plan.ReasonAnalysisFailed || e.Spec.Template.Spec.Containers[0].Image != "agent:v1" {
		t.Errorf("failed canary: reason %q, image %s; want %s and agent:v1 restored", e.Status.Reason, e.Spec.Template.Spec.Containers[0].Image, plan.ReasonAnalysisFailed)
	}
	h.rolledOutState("agent", "agent:v1", 4, v1.StateCanaryFailed)
	canary, outside := stop()
	if len(canary) != 1 {
		t.Errorf("canary nodes %v, want one", canary)
	}
	if len(outside) > 0 {
		t.Errorf("pods of the failed template outside the canary nodes: %v", outside)
	}
	cond := condOf(e.Status.Conditions, v1.ConditionCanaryFailed)
	if cond == nil || !strings.Contains(cond.Message, "canary-error-rate") || !strings.Contains(cond.Message, "not < 0.05") {
		t.Errorf("condition %s: %+v, want the query and its value", v1.ConditionCanaryFailed, cond)
	}
	ev := h.eventMessages("agent", EventCanaryAnalysisFailed)
	if len(ev) == 0 || !strings.Contains(ev[0], "canary-error-rate = 0.5") || !strings.Contains(ev[0], canary[0]) {
		t.Errorf("%s Events %q, want one naming the query, its value 0.5 and the canary node %v", EventCanaryAnalysisFailed, ev, canary)
	}
	if n := testutil.ToFloat64(h.ctrl.metrics.analysisFailures.WithLabelValues(h.ns, "agent", "canary-error-rate")); n != 1 {
		t.Errorf("slipway_eds_canary_analysis_failures_total = %v, want 1", n)
	}
	cl, out := h.kubectlEDS("")
	if err := cl.CanaryAnalysis(context.Background(), "agent"); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "Last failure:") || !strings.Contains(got, "canary-error-rate") || !strings.Contains(got, plan.ReasonAnalysisFailed) {
		t.Errorf("kubectl-eds canary analysis does not show the failure:\n%s", got)
	}
}

// The same release, healthy: the analysis passes and the canary is
// validated (by an evaluation made after its duration), then rolled out.
func TestCanaryAnalysisValidatesAHealthyRelease(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, prom := h.analysisCluster(func(string) bool { return false })
	h.create(withAnalysis(withCanary(h.ownDaemon("agent", "agent:v1"), 5*time.Second), prom.URL))
	h.rolledOut("agent", "agent:v1", 4)
	h.setImage("agent", "agent:v2")
	e := h.waitState("agent", v1.StateCanary, time.Minute)
	var seen []string
	h.eventually(time.Minute, "the canary's end", func() (bool, string) {
		e = h.get("agent")
		if e.Status.Canary != nil && e.Status.Canary.Analysis != nil {
			if a := e.Status.Canary.Analysis; len(seen) == 0 || seen[len(seen)-1] != a.Verdict+" "+a.Reason {
				seen = append(seen, a.Verdict+" "+a.Reason)
			}
		}
		return e.Status.State != v1.StateCanary, fmt.Sprintf("%+v", e.Status)
	})
	t.Logf("status.canary.analysis while the canary ran: %q", seen)
	h.rolledOut("agent", "agent:v2", 4)
	if len(seen) == 0 {
		t.Errorf("status.canary.analysis never shown while the canary ran")
	}
	ev := h.eventMessages("agent", EventCanaryValidated)
	if len(ev) == 0 || !strings.Contains(ev[0], "its analysis passed") {
		t.Errorf("%s Events %q, want one saying the analysis passed", EventCanaryValidated, ev)
	}
	if n := h.events("agent")[EventCanaryAnalysisFailed]; n != 0 {
		t.Errorf("%d %s Events for a healthy release", n, EventCanaryAnalysisFailed)
	}
}

// An analysis that cannot be evaluated (no Prometheus listens) holds the
// canary past its duration, with the reason in the status: never validated.
func TestCanaryAnalysisThatCannotBeJudgedHolds(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, s := range []string{"a", "b"} {
		h.addNode(s)
	}
	down := "http://" + promtest.FreeAddr(t)
	e := withAnalysis(withCanary(h.ownDaemon("agent", "agent:v1"), 2*time.Second), down)
	e.Spec.Strategy.Canary.AutoFail = &v1.ExtendedDaemonSetSpecStrategyCanaryAutoFail{CanaryTimeout: &metav1.Duration{Duration: time.Hour}}
	h.create(e)
	h.rolledOut("agent", "agent:v1", 2)
	h.setImage("agent", "agent:v2")
	h.waitState("agent", v1.StateCanary, time.Minute)
	var st v1.ExtendedDaemonSetStatus
	h.eventually(time.Minute, "the canary held by its analysis", func() (bool, string) {
		st = h.get("agent").Status
		c := condOf(st.Conditions, v1.ConditionCanaryAnalysisHolding)
		return st.Reason == ReasonAnalysisHolding && c != nil && c.Status == metav1.ConditionTrue && c.Reason == "CannotJudge", fmt.Sprintf("%+v", st)
	})
	if a := st.Canary.Analysis; a == nil || a.Verdict != "Hold" || !strings.Contains(a.Reason, "could not be evaluated") {
		t.Errorf("status.canary.analysis %+v, want Hold with the reason", a)
	}
	cl, out := h.kubectlEDS("")
	if err := cl.CanaryAnalysis(context.Background(), "agent"); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "Verdict:") || !strings.Contains(got, "Hold") || !strings.Contains(got, "CannotJudge") || !strings.Contains(got, "could not be evaluated") {
		t.Errorf("kubectl-eds canary analysis does not show the hold:\n%s", got)
	}
	wide, wout := h.kubectlEDS("wide")
	if err := wide.Get(context.Background(), "agent"); err != nil {
		t.Fatal(err)
	}
	if got := wout.String(); !strings.Contains(got, "ANALYSIS") || !strings.Contains(got, "Hold (canary-error-rate)") {
		t.Errorf("kubectl-eds get -o wide does not show the analysis:\n%s", got)
	}
	time.Sleep(4 * time.Second) // past the canary's duration (2 s): still held
	st = h.get("agent").Status
	if st.State != v1.StateCanary || st.Reason != ReasonAnalysisHolding {
		t.Errorf("state %s (%s) past the duration, want Canary (%s)", st.State, st.Reason, ReasonAnalysisHolding)
	}
	for _, p := range h.pods("agent") {
		if p.Spec.Containers[0].Image == "agent:v2" && p.Labels[v1.LabelCanary] != "true" {
			t.Errorf("pod %s on %s runs agent:v2 outside the canary", p.Name, p.Spec.NodeName)
		}
	}
	if n := h.events("agent")[EventCanaryValidated]; n != 0 {
		t.Errorf("%d %s Events while the analysis could not be judged", n, EventCanaryValidated)
	}
	if v := testutil.ToFloat64(h.ctrl.metrics.analysisHolding.WithLabelValues(h.ns, "agent")); v != 1 {
		t.Errorf("slipway_eds_canary_analysis_holding = %v, want 1", v)
	}
}

func condOf(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// eventMessages are the messages of the Events of reason about object name.
func (h *harness) eventMessages(name, reason string) []string {
	h.t.Helper()
	list, err := h.kube.CoreV1().Events(h.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}

// The CRD refuses at apply the canary analyses the controller could not
// evaluate, each with what to write; good ones pass.
func TestCELRulesRefuseBadCanaryAnalyses(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t)
	ctx := context.Background()
	create := func(analysis string) error {
		doc := `{"apiVersion":"eds.slipway.dev/v1alpha1","kind":"ExtendedDaemonSet","metadata":{"generateName":"a-"},"spec":{"strategy":{"canary":{"analysis":` +
			analysis + `}},"template":{"spec":{"containers":[{"name":"d","image":"x"}]}}}}`
		return h.eds.EdsV1alpha1().RESTClient().Post().Namespace(h.ns).Resource("extendeddaemonsets").
			Body([]byte(doc)).SetHeader("Content-Type", "application/json").Do(ctx).Error()
	}
	const prom = `"prometheusURL":"http://prometheus.monitoring:9090"`
	q := func(name, cond string) string {
		return `{"name":"` + name + `","query":"sum(rate(errors_total[2m]))","condition":"` + cond + `"}`
	}
	bad := map[string]struct{ analysis, want string }{
		"condition in words":         {`{` + prom + `,"queries":[` + q("errors", "below 0.05") + `]}`, `spec.strategy.canary.analysis.queries[].condition: write "<op> <number>"`},
		"condition without a number": {`{` + prom + `,"queries":[` + q("errors", "<") + `]}`, `e.g. "< 0.05"`},
		"url without a scheme":       {`{"prometheusURL":"prometheus:9090","queries":[` + q("errors", "< 1") + `]}`, "spec.strategy.canary.analysis.prometheusURL: write the Prometheus address"},
		"asks nothing":               {`{` + prom + `}`, "spec.strategy.canary.analysis asks nothing"},
		"a name twice":               {`{` + prom + `,"queries":[` + q("errors", "< 1") + `,` + q("errors", "< 2") + `]}`, "a name of its own"},
		"a query without a name":     {`{` + prom + `,"queries":[` + q(" ", "< 1") + `]}`, "queries[].name is empty"},
		"noData maybe":               {`{` + prom + `,"queries":[{"name":"a","query":"x","condition":"< 1","noData":"maybe"}]}`, "noData: write hold"},
		"interval in days":           {`{` + prom + `,"interval":"1d","queries":[` + q("errors", "< 1") + `]}`, "spec.strategy.canary.analysis.interval"},
	}
	for name, tc := range bad {
		if err := create(tc.analysis); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal with %s", name, err, tc.want)
		}
	}
	for _, ok := range []string{
		`{` + prom + `,"queries":[` + q("a", "<=1") + `,` + q("b", ">= -2.5e3") + `,` + q("c", "== 0") + `,` + q("d", " Empty ") + `]}`,
		`{"prometheusURL":"https://prom.example/prefix","alerts":{"filterRegexp":"^Watchdog$","firingOnly":true},"interval":"30s","timeout":"5s"}`,
	} {
		if err := create(ok); err != nil {
			t.Errorf("refused %s: %v", ok, err)
		}
	}
}

// What the CRD cannot refuse (an alert filter that does not compile) or an
// object stored before its rules is refused by validate, with what to write.
func TestResolveCanaryAnalysis(t *testing.T) {
	q := []v1.AnalysisQuery{{Name: "errors", Query: "sum(rate(errors_total[2m]))", Condition: "< 0.05"}}
	d := func(s string) *metav1.Duration { v, _ := time.ParseDuration(s); return &metav1.Duration{Duration: v} }
	for _, tc := range []struct {
		name string
		a    v1.CanaryAnalysis
		want string // "" = accepted
	}{
		{"queries", v1.CanaryAnalysis{PrometheusURL: "http://prom:9090", Queries: q}, ""},
		{"alerts only", v1.CanaryAnalysis{PrometheusURL: "https://prom/prefix", Alerts: &v1.AlertGate{FilterRegexp: "^Watchdog$"}}, ""},
		{"a filter that does not compile", v1.CanaryAnalysis{PrometheusURL: "http://prom:9090", Alerts: &v1.AlertGate{FilterRegexp: "(("}}, "spec.strategy.canary.analysis.alerts.filterRegexp"},
		{"no scheme", v1.CanaryAnalysis{PrometheusURL: "prom:9090", Queries: q}, "write the Prometheus address as http(s)://host:port"},
		{"asks nothing", v1.CanaryAnalysis{PrometheusURL: "http://prom:9090"}, "asks nothing"},
		{"a condition in words", v1.CanaryAnalysis{PrometheusURL: "http://prom:9090", Queries: []v1.AnalysisQuery{{Name: "e", Query: "x", Condition: "below 1"}}}, "spec.strategy.canary.analysis.queries"},
		{"interval zero", v1.CanaryAnalysis{PrometheusURL: "http://prom:9090", Queries: q, Interval: d("0s")}, "interval is 0s: write a positive duration"},
	} {
		a, err := resolveCanaryAnalysis(&tc.a)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tc.name, err)
		case tc.want == "" && (a.interval != defaultAnalysisInterval || a.key == ""):
			t.Errorf("%s: interval %s key %q, want the default and a key", tc.name, a.interval, a.key)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// A Prometheus that accepts and never answers, with a query timeout far
// longer than a sync may take: the evaluation is cut at half the sync's
// allowance, the canary holds with the reason, and /healthz stays 200.
func TestCanaryAnalysisOfAHungPrometheusHoldsWithinTheSync(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	h.startControllerWith(Options{Config: env.Config}, func(c *Controller) { c.loopAllowance = 4 * time.Second })
	for _, s := range []string{"a", "b"} {
		h.addNode(s)
	}
	e := withAnalysis(withCanary(h.ownDaemon("agent", "agent:v1"), 2*time.Second), "http://"+l.Addr().String())
	e.Spec.Strategy.Canary.Analysis.Timeout = &metav1.Duration{Duration: 10 * time.Minute}
	h.create(e)
	h.rolledOut("agent", "agent:v1", 2)
	h.setImage("agent", "agent:v2")
	var st v1.ExtendedDaemonSetStatus
	// A deadline for a stuck test: the query's own timeout (10 minutes) would come far later.
	h.eventually(90*time.Second, "the canary held by a hung Prometheus", func() (bool, string) {
		st = h.get("agent").Status
		return st.Reason == ReasonAnalysisHolding && st.Canary != nil && st.Canary.Analysis != nil, fmt.Sprintf("%+v", st)
	})
	if a := st.Canary.Analysis; a.Verdict != "Hold" || !strings.Contains(a.Reason, "context deadline exceeded") {
		t.Errorf("status.canary.analysis %+v, want Hold cut at the sync's bound", a)
	}
	mux := http.NewServeMux()
	h.ctrl.probe.Install(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("/healthz %d (%s) while the analysis waits on a hung Prometheus", rec.Code, rec.Body.String())
	}
}

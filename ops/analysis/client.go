package analysis

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	papi "github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

// Querier runs one instant PromQL query (Prometheus's /api/v1/query, or
// any server speaking it).
type Querier interface {
	Query(ctx context.Context, expr string, at time.Time) ([]Sample, error)
}

// NewClient is a Querier of the Prometheus at address (http(s)://host:port,
// with a path prefix when it serves under one), through client_golang's
// API client.
func NewClient(address string) (Querier, error) {
	u, err := url.Parse(address)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--prometheus-url %q: write the Prometheus address as http(s)://host:port", address)
	}
	c, err := papi.NewClient(papi.Config{Address: address, RoundTripper: http.DefaultTransport})
	if err != nil {
		return nil, fmt.Errorf("prometheus client for %s: %w", address, err)
	}
	return promQuerier{api: v1.NewAPI(c)}, nil
}

type promQuerier struct{ api v1.API }

func (p promQuerier) Query(ctx context.Context, expr string, at time.Time) ([]Sample, error) {
	v, _, err := p.api.Query(ctx, expr, at)
	if err != nil {
		return nil, err
	}
	return Samples(v)
}

// Samples flattens an instant query's result: a vector's series, a
// scalar as one unlabelled sample. A range (matrix) or string result is
// an error: the analysis asks instant questions.
func Samples(v model.Value) ([]Sample, error) {
	switch r := v.(type) {
	case model.Vector:
		out := make([]Sample, 0, len(r))
		for _, s := range r {
			l := make(map[string]string, len(s.Metric))
			for k, v := range s.Metric {
				l[string(k)] = string(v)
			}
			out = append(out, Sample{Labels: l, Value: float64(s.Value)})
		}
		return out, nil
	case *model.Scalar:
		return []Sample{{Value: float64(r.Value)}}, nil
	case nil:
		return nil, errors.New("no result")
	}
	return nil, fmt.Errorf("the result is a %s, not an instant vector or scalar (drop the range selector, or wrap it in a function such as rate())", v.Type())
}

// Evaluate runs every query of s (and its alert gate) against q at now,
// each within s.Timeout, and judges them; nodes are the wave's ($nodes).
// It never returns Pass for what it could not evaluate.
func Evaluate(ctx context.Context, q Querier, s Spec, nodes []string, now time.Time) Result {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	run := func(expr string) ([]Sample, error) {
		if q == nil {
			return nil, errors.New("no Prometheus configured (--prometheus-url)")
		}
		qctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		out, err := q.Query(qctx, expr, now)
		if err != nil && qctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s: %w", timeout, err)
		}
		return out, err
	}
	var findings []Finding
	if s.Alerts.Enabled {
		series, err := run("ALERTS")
		findings = append(findings, JudgeAlerts(s.Alerts, series, err))
	}
	for _, query := range s.Queries {
		expr := Expand(query.Expr, nodes)
		samples, err := run(expr)
		findings = append(findings, JudgeQuery(query, expr, samples, err))
	}
	return Combine(now, findings)
}

// File is an analysis file: the queries of `--analysis-file`.
//
//	timeout: 10s
//	queries:
//	- name: error-rate
//	  query: sum(rate(http_requests_total{code=~"5.."}[2m])) / sum(rate(http_requests_total[2m]))
//	  condition: "< 0.05"
//	- name: crash-loops
//	  query: kube_pod_container_status_waiting_reason{reason="CrashLoopBackOff"}
//	  condition: empty
type File struct {
	Timeout string  `json:"timeout,omitempty"`
	Queries []Query `json:"queries"`
}

// LoadFile reads an analysis file (YAML or JSON) into a Spec's queries
// and timeout, checked.
func LoadFile(path string) (Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Spec{}, fmt.Errorf("analysis file: %w", err)
	}
	return ParseFile(b, path)
}

// ParseFile parses the text of an analysis file named name.
func ParseFile(b []byte, name string) (Spec, error) {
	var f File
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return Spec{}, fmt.Errorf("analysis file %s: %w (see docs/analysis.md for its fields)", name, err)
	}
	s := Spec{Queries: f.Queries}
	if f.Timeout != "" {
		d, err := time.ParseDuration(f.Timeout)
		if err != nil || d <= 0 {
			return Spec{}, fmt.Errorf("analysis file %s: timeout %q: write a positive duration such as 10s", name, f.Timeout)
		}
		s.Timeout = d
	}
	if len(s.Queries) == 0 {
		return Spec{}, fmt.Errorf("analysis file %s: no queries (list them under queries:)", name)
	}
	if err := s.Validate(); err != nil {
		return Spec{}, fmt.Errorf("analysis file %s: %w", name, err)
	}
	return s, nil
}

// AlertFilter compiles --alert-filter-regexp ("" = none).
func AlertFilter(expr string) (*regexp.Regexp, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, nil
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("--alert-filter-regexp %q is not a regular expression: %w", expr, err)
	}
	return re, nil
}

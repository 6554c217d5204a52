// Package promtest runs a real Prometheus server for tests (the binary
// scripts/install-tools builds from the module proxy, beside promtool),
// scraping the targets a test gives it, and a stand-in workload exporter
// whose error rate a test sets per node. Analyses are then proven against
// the server users run, its PromQL, rate() and ALERTS included.
package promtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"slipway.dev/slipway/ops/testenv/tools"
)

// Options configure a Server.
type Options struct {
	// Targets are host:port addresses scraped at /metrics (job "standin").
	Targets []string
	// Interval is the scrape and rule evaluation interval (default 1s).
	Interval time.Duration
	// Rules is the text of a rule file (alerting rules feed ALERTS), "" none.
	Rules string
}

// Server is a running Prometheus.
type Server struct {
	URL string // http://127.0.0.1:port
	cmd *exec.Cmd
	log *bytes.Buffer
}

// Binary is the path of the prometheus binary: in $SLIPWAY_TOOLS_DIR, else
// in the directory scripts/install-tools prints.
func Binary() (string, error) {
	p, err := tools.Binary(context.Background(), "prometheus")
	if err != nil {
		return "", fmt.Errorf("find prometheus (scripts/install-tools builds it): %w", err)
	}
	return p, nil
}

// Start runs Prometheus until the test ends, and waits until it is ready.
// The free address it picks may be taken before Prometheus listens on it
// (the tests of a package run side by side): it then tries another.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	dir := t.TempDir()
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %s\n  evaluation_interval: %s\n", o.Interval, o.Interval)
	if o.Rules != "" {
		if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(o.Rules), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg.WriteString("rule_files: [rules.yaml]\n")
	}
	cfg.WriteString("scrape_configs:\n- job_name: standin\n  static_configs:\n  - targets: [")
	for i, tg := range o.Targets {
		if i > 0 {
			cfg.WriteString(", ")
		}
		fmt.Fprintf(&cfg, "%q", tg)
	}
	cfg.WriteString("]\n")
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		s, err := launch(t, bin, dir, FreeAddr(t))
		if err == nil {
			return s
		}
		if !errors.Is(err, errAddrTaken) || attempt == 5 {
			t.Fatal(err)
		}
		t.Logf("prometheus: %v; again on another", err)
	}
}

// errAddrTaken: the free address FreeAddr found was taken before
// Prometheus listened on it (another test's server, say).
var errAddrTaken = errors.New("its address was taken")

// launch runs Prometheus with the configuration in dir on addr until the
// test ends, and waits until it is ready: its own server answers there,
// not another that took the address first.
func launch(t testing.TB, bin, dir, addr string) (*Server, error) {
	s := &Server{URL: "http://" + addr, log: &bytes.Buffer{}}
	s.cmd = exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = &lockedWriter{w: s.log}, &lockedWriter{w: s.log}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start prometheus: %w", err)
	}
	exited := make(chan struct{}) // closed once it exited: every waiter sees it
	var exitErr error
	go func() { exitErr = s.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus log:\n%s", s.log.String())
		}
	})
	deadline := time.Now().Add(2 * time.Minute) // a deadline for a stuck start, not a timing assertion
	for {
		if s.ready() {
			if !s.servesFrom(filepath.Join(dir, "data")) {
				_ = s.cmd.Process.Kill()
				<-exited // its storage's lock let go before the next try takes it
				return nil, fmt.Errorf("%w: %s answers from another server's storage", errAddrTaken, addr)
			}
			return s, nil
		}
		select {
		case <-exited:
			if strings.Contains(s.log.String(), "address already in use") {
				return nil, fmt.Errorf("%w: %s", errAddrTaken, addr)
			}
			return nil, fmt.Errorf("prometheus exited: %v\n%s", exitErr, s.log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("prometheus not ready after 2 minutes:\n%s", s.log.String())
		}
	}
}

// ready tells whether a Prometheus at s.URL says it is ready.
func (s *Server) ready() bool {
	resp, err := http.Get(s.URL + "/-/ready")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// servesFrom tells whether the Prometheus at s.URL keeps its data in
// path (its flags, as it reports them).
func (s *Server) servesFrom(path string) bool {
	resp, err := http.Get(s.URL + "/api/v1/status/flags")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var flags struct {
		Data map[string]string `json:"data"`
	}
	return json.NewDecoder(resp.Body).Decode(&flags) == nil && flags.Data["storage.tsdb.path"] == path
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// FreeAddr is a loopback address nothing listens on now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Exporter is a stand-in workload: one replica per node, each serving
// requests, some of which fail. Every scrape counts 100 more requests per
// node in standin_requests_total{node, code}, ErrorRate(node) of them with
// code 500, so
//
//	sum(rate(standin_requests_total{code="500"}[5s])) / sum(rate(standin_requests_total[5s]))
//
// is the workload's error rate, and the same by (node) each node's.
type Exporter struct {
	Addr string // host:port of /metrics
	// ErrorRate is each node's share of failing requests (0..1) now.
	ErrorRate func(node string) float64
	nodes     []string
	requests  *prometheus.CounterVec
	mu        sync.Mutex
}

// StartExporter serves the stand-in workload of nodes until the test ends.
func StartExporter(t testing.TB, nodes []string, errorRate func(node string) float64) *Exporter {
	t.Helper()
	e := &Exporter{ErrorRate: errorRate, nodes: append([]string(nil), nodes...),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "standin_requests_total", Help: "Requests the stand-in workload served, by node and code."}, []string{"node", "code"})}
	sort.Strings(e.nodes)
	reg := prometheus.NewRegistry()
	reg.MustRegister(e.requests)
	for _, n := range e.nodes { // every series from the first scrape on: rate() has two points sooner
		e.requests.WithLabelValues(n, "200")
		e.requests.WithLabelValues(n, "500")
	}
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		e.serve()
		metrics.ServeHTTP(w, r)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	e.Addr = l.Addr().String()
	return e
}

// serve counts the requests served since the last scrape.
func (e *Exporter) serve() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range e.nodes {
		rate := 0.0
		if e.ErrorRate != nil {
			rate = min(max(e.ErrorRate(n), 0), 1)
		}
		e.requests.WithLabelValues(n, "500").Add(100 * rate)
		e.requests.WithLabelValues(n, "200").Add(100 * (1 - rate))
	}
}

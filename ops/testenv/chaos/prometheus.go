package chaos

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// standInPrometheus answers Prometheus's instant query API
// (/api/v1/query) for a run's analysis: ALERTS is empty (no alert), every
// other query one series of value 0 (within any "< 1" threshold), or of
// value(), when set, asked at each query (a release's metric that goes bad
// on the nodes running it); while down, every query fails (503): the
// analysis cannot be evaluated.
type standInPrometheus struct {
	srv     *http.Server
	addr    string
	down    atomic.Bool
	queries atomic.Int64
	value   func() float64
}

func startPrometheus() (*standInPrometheus, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("stand-in Prometheus: %w", err)
	}
	p := &standInPrometheus{addr: ln.Addr().String()}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is its address, for --prometheus-url.
func (p *standInPrometheus) URL() string { return "http://" + p.addr }

func (p *standInPrometheus) close() { _ = p.srv.Close() }

func (p *standInPrometheus) serve(w http.ResponseWriter, r *http.Request) {
	p.queries.Add(1)
	if !strings.HasSuffix(r.URL.Path, "/api/v1/query") {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if p.down.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "error", "errorType": "unavailable", "error": "stand-in Prometheus down (a chaos fault)"})
		return
	}
	_ = r.ParseForm()
	result := []any{}
	if q := r.Form.Get("query"); !strings.Contains(q, "ALERTS") {
		v := 0.0
		if p.value != nil {
			v = p.value()
		}
		result = append(result, map[string]any{"metric": map[string]string{}, "value": []any{float64(time.Now().Unix()), fmt.Sprint(v)}})
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
}

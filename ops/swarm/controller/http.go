package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"

	corev1 "k8s.io/api/core/v1"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/health"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// View is one Swarm in /assignments: the assignment in force, read from the
// workers' ConfigMap, and the Swarm's summary.
type View struct {
	Version     int64               `json:"version"`
	Assignments map[string][]string `json:"assignments"`
	Jobs        int32               `json:"jobs"`
	Unassigned  int32               `json:"unassigned"`
	Converged   bool                `json:"converged"`
}

// serveHTTP listens on HTTPAddr and serves /assignments (JSON, keyed by
// Swarm name), /metrics, /healthz and /readyz until ctx ends.
func (c *Controller) serveHTTP(ctx context.Context) error {
	ln, err := net.Listen("tcp", c.opts.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s (--http): %w", c.opts.HTTPAddr, err)
	}
	c.addr.Store(ln.Addr().String())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(c.metrics.reg, promhttp.HandlerOpts{}))
	c.probe.Install(mux) // /healthz: the work loop turns; /readyz: the caches are filled
	mux.HandleFunc("/assignments", c.serveAssignments)
	health.Serve(ctx, ln, mux, c.log)
	c.log.Info("serving /assignments, /metrics, /healthz and /readyz", "addr", ln.Addr().String())
	return nil
}

func (c *Controller) serveAssignments(w http.ResponseWriter, _ *http.Request) {
	if !c.synced.Load() {
		http.Error(w, "caches not filled yet", http.StatusServiceUnavailable)
		return
	}
	out := map[string]View{}
	list, _ := c.swarms.Swarms(c.opts.Namespace).List(everything())
	for _, sw := range list {
		v := View{Assignments: map[string][]string{}, Jobs: sw.Status.Jobs, Unassigned: sw.Status.Unassigned}
		for _, cond := range sw.Status.Conditions {
			v.Converged = v.Converged || (cond.Type == swarmv1.ConditionConverged && cond.Status == "True")
		}
		if obj, ok, _ := c.configMaps.GetByKey(sw.Namespace + "/" + configMapName(sw)); ok {
			if rec := readRecord(obj.(*corev1.ConfigMap)); rec.parseErr == nil {
				v.Version, v.Assignments = rec.cfg.Version, rec.cfg.Assignments()
			}
		}
		out[sw.Name] = v
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

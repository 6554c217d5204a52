package worker

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"slipway.dev/slipway/ops/health"
)

// DefaultHTTPAddr is where a worker serves /healthz and /readyz unless told
// otherwise (the controller's port is 9480).
const DefaultHTTPAddr = ":9481"

// newProbe is the worker's /healthz and /readyz (package ops/health):
//
//   - healthy while its loop turns: it turns at least every Poll, so a loop
//     wedged in a read of its config (a hung volume), a report that never
//     returns or a command that will not stop misses its beat and the kubelet
//     restarts the container;
//   - ready once it has read its config file (a share or none: the
//     controller gives shares to Ready pods only, so readiness must not wait
//     for one), has reported the version it applied, and, with a Lease,
//     holds it (a worker cut off runs nothing, so its pod is not Ready).
func (w *worker) newProbe() {
	w.probe = health.New()
	w.beat = w.probe.Loop("worker", w.opts.StallAfter)
	w.probe.ReadyWhen("config read", w.configRead.Load)
	w.probe.ReadyWhen("applied version reported", func() bool { return !w.unreported.Load() })
	if w.tenure != nil {
		w.probe.ReadyWhen("worker Lease held", func() bool { return !w.fenced() })
	}
}

// serveProbes listens on HTTPAddr and serves the probe until ctx ends.
func (w *worker) serveProbes(ctx context.Context) error {
	if w.opts.HTTPAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", w.opts.HTTPAddr)
	if err != nil {
		return fmt.Errorf("serve /healthz and /readyz on %s: %w (pass --http with a free address, or --http '' to serve none)", w.opts.HTTPAddr, err)
	}
	if w.opts.listening != nil {
		w.opts.listening(ln.Addr().String())
	}
	mux := http.NewServeMux()
	w.probe.Install(mux)
	health.Serve(ctx, ln, mux, w.log)
	w.log.Info("serving /healthz and /readyz", "addr", ln.Addr().String())
	return nil
}

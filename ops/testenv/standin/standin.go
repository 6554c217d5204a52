// Package standin runs many of slipway's node agents in one process, for
// fleets too large for one agent process per simulated node (thousands of
// kwok nodes on one machine). Each stand-in is the real agent
// (ops/agent.Agent: the same protocol, the same client code, the same
// reports and views), with its own client and connection acting as the
// agent's ServiceAccount bound to its node (the node-name extra a bound
// token carries), so RBAC and the admission policies judge every write as
// they judge a DaemonSet pod's. What differs from a process per node: the
// Go runtime and the binary are shared, and a reboot ends the stand-in's
// agent (its context) and starts a fresh one after the supervisor's
// simulated reboot, where a real node's agent process is killed and
// started again.
package standin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"slipway.dev/slipway/ops/agent"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/supervisor"
)

// Options say which nodes get a stand-in and how each is set up.
type Options struct {
	// Kubeconfig is the admin kubeconfig the stand-ins' identities impersonate from.
	Kubeconfig string
	// Identity is the agent's ServiceAccount; each stand-in acts as it, bound to its node.
	Identity *testenv.Identity
	// Supervisor simulates the nodes' reboots.
	Supervisor *supervisor.Supervisor
	// Nodes get a stand-in each; node n's root is <NodesRoot>/<n>.
	Nodes     []string
	NodesRoot string
	// Slipway is the binary that installs Install on each node's system
	// directory from Mirror before its first boot, as the node's image would.
	Slipway, Mirror, Install string
	// RebootDelay is how long a simulated reboot keeps the node down.
	RebootDelay time.Duration
	// Agent is every stand-in's agent options; NodeName, Config, SystemDir,
	// CmdlineFile, Rebooter and BootIDFromNode are set per node.
	Agent agent.Options
	// Parallel bounds the installs at once (default 2).
	Parallel int
	// Log receives the stand-ins' own logs (default: discarded).
	Log *slog.Logger
}

// Fleet is the running stand-ins.
type Fleet struct {
	opts  Options
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	mu    sync.Mutex
	nodes map[string]*host
	errs  []error
	// restarts counts agents that ended on their own and were started again.
	restarts int
}

// host is one node's stand-in: its current agent's end, and its boots.
type host struct {
	node   string
	dir    string
	cfg    *rest.Config
	cancel context.CancelFunc
	done   chan struct{}
}

// Start installs each node's system directory and starts its agent.
func Start(ctx context.Context, opts Options) (*Fleet, error) {
	if opts.Supervisor == nil || opts.Identity == nil || opts.Kubeconfig == "" || opts.Slipway == "" {
		return nil, errors.New("standin: Kubeconfig, Identity, Supervisor and Slipway are required")
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 2
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	runCtx, stop := context.WithCancel(context.Background())
	f := &Fleet{opts: opts, ctx: runCtx, stop: stop, nodes: map[string]*host{}}
	slots := make(chan struct{}, opts.Parallel)
	var wg sync.WaitGroup
	errs := make([]error, len(opts.Nodes))
	for i, n := range opts.Nodes {
		h := &host{node: n, dir: filepath.Join(opts.NodesRoot, n)}
		f.nodes[n] = h
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				return
			}
			if errs[i] = f.install(ctx, h); errs[i] != nil {
				return
			}
			h.cfg, errs[i] = nodeConfig(opts.Kubeconfig, opts.Identity, n)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		stop()
		return nil, err
	}
	for _, n := range opts.Nodes {
		if err := f.boot(f.nodes[n]); err != nil {
			f.Stop()
			return nil, err
		}
	}
	return f, nil
}

// Stop ends every stand-in's agent and waits for them.
func (f *Fleet) Stop() {
	f.stop()
	f.wg.Wait()
}

// Errors are the agents' failures to run (an agent that returned an error).
func (f *Fleet) Errors() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.errs...)
}

// install puts the first release on the node's system directory, as the
// e2e node's first boot does.
func (f *Fleet) install(ctx context.Context, h *host) error {
	sys := filepath.Join(h.dir, "k3os", "system")
	if _, err := os.Lstat(filepath.Join(sys, "k3os", "current")); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(h.dir, "run", "k3os"), 0o755); err != nil {
		return fmt.Errorf("node %s: %w", h.node, err)
	}
	cmd := exec.CommandContext(ctx, f.opts.Slipway, "ops", "upgrade", "--system-dir", sys, "--source", f.opts.Mirror,
		"--version", f.opts.Install, "--rootfs", "--kernel", "--reboot=false", "--lock-file", filepath.Join(h.dir, "run", "k3os", "upgrade.lock"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("install %s on node %s: %w: %s", f.opts.Install, h.node, err, out)
	}
	return nil
}

// boot writes the kernel command line the loader would pass (naming the
// rootfs `current` names) and starts the node's agent.
func (f *Fleet) boot(h *host) error {
	sys := filepath.Join(h.dir, "k3os", "system")
	cur, err := os.Readlink(filepath.Join(sys, "k3os", "current"))
	if err != nil {
		return fmt.Errorf("node %s's current release: %w", h.node, err)
	}
	cmdline := filepath.Join(h.dir, "cmdline")
	if err := os.WriteFile(cmdline, []byte("slipway.rootfs="+filepath.Base(cur)+"\n"), 0o644); err != nil {
		return fmt.Errorf("node %s's command line: %w", h.node, err)
	}
	opts := f.opts.Agent
	opts.NodeName, opts.Config, opts.SystemDir, opts.CmdlineFile = h.node, rest.CopyConfig(h.cfg), sys, cmdline
	opts.BootIDFromNode, opts.BootRecordDir = true, ""
	opts.Rebooter = rebooter{f: f, h: h}
	if opts.Log == nil {
		opts.Log = f.opts.Log
	}
	a, err := agent.New(opts)
	if err != nil {
		return fmt.Errorf("node %s's agent: %w", h.node, err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	f.mu.Lock()
	h.cancel, h.done = cancel, done
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(done)
		// An agent that fails (an API server refusing requests at start,
		// 429) is started again as a kubelet restarts a crashed container:
		// after 10 s, doubling up to 5 min.
		for backoff := 10 * time.Second; ; backoff = min(2*backoff, 5*time.Minute) {
			err := a.Run(ctx)
			if ctx.Err() != nil {
				return
			}
			f.mu.Lock()
			f.restarts++
			f.mu.Unlock()
			f.opts.Log.Warn("stand-in agent ended; starting it again", "node", h.node, "err", err, "after", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			if a, err = agent.New(opts); err != nil {
				f.mu.Lock()
				f.errs = append(f.errs, fmt.Errorf("node %s's agent: %w", h.node, err))
				f.mu.Unlock()
				return
			}
		}
	}()
	return nil
}

// Restarts is how many times a stand-in's agent ended on its own and was
// started again (a real agent's container restarts).
func (f *Fleet) Restarts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restarts
}

// rebooter is a stand-in's reboot: like a real one it returns at once and
// the agent dies soon after; the node comes back after the supervisor's
// simulated reboot, with a new boot ID and a fresh agent.
type rebooter struct {
	f *Fleet
	h *host
}

func (r rebooter) String() string { return "simulated reboot of node " + r.h.node }

func (r rebooter) Reboot(context.Context) error {
	f, h := r.f, r.h
	f.mu.Lock()
	cancel, done := h.cancel, h.done
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		cancel()
		<-done
		if f.ctx.Err() != nil {
			return
		}
		if err := f.opts.Supervisor.Reboot(f.ctx, h.node, f.opts.RebootDelay); err != nil {
			f.opts.Log.Error("simulated reboot failed", "node", h.node, "err", err)
			if f.ctx.Err() != nil {
				return
			}
		}
		if err := f.boot(h); err != nil {
			f.mu.Lock()
			f.errs = append(f.errs, err)
			f.mu.Unlock()
		}
	}()
	return nil
}

// nodeConfig is a client config acting as id bound to node, on a
// connection of its own (as an agent process has), not one shared with
// the other stand-ins.
func nodeConfig(kubeconfig string, id *testenv.Identity, node string) (*rest.Config, error) {
	kc, err := testenv.KubeconfigAs(kubeconfig, id, node)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("node %s's client config: %w", node, err)
	}
	// A dial function of its own keeps client-go from sharing the
	// connection with every other stand-in (its transport cache is keyed
	// by the TLS settings, the same for all of them).
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = dialer.DialContext
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("node %s's transport: %w", node, err)
	}
	return &rest.Config{Host: cfg.Host, APIPath: cfg.APIPath, Transport: rt, QPS: cfg.QPS, Burst: cfg.Burst, Timeout: cfg.Timeout}, nil
}

// Sample picks every nth node of nodes (from the first), the nodes that
// run real agent processes beside the stand-ins; n <= 0 picks none.
func Sample(nodes []string, n int) (real, standIn []string) {
	for i, node := range nodes {
		if n > 0 && i%n == 0 {
			real = append(real, node)
		} else {
			standIn = append(standIn, node)
		}
	}
	return real, standIn
}

package updateoperator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"slipway.dev/slipway/ops/health"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/updateoperator/platform"
)

// AgentOptions configure `slipway update-operator agent`.
type AgentOptions struct {
	Config   *rest.Config
	Prefix   string // default DefaultPrefix
	NodeName string // from the downward API
	Platform platform.Platform
	// CheckInterval is how often a resting node checks for updates (default 30m).
	CheckInterval time.Duration
	// Resync re-reads the Node at least this often (default 1m).
	Resync time.Duration
	// BootID returns the host's boot ID (default: the kernel's,
	// /proc/sys/kernel/random/boot_id, the host's in every container): a
	// new one after reboot-update is the reboot done. Never the Node's
	// status, which the kubelet writes when it gets to it.
	BootID func(context.Context) (string, error)
	// CheckTimeout bounds one check for updates (default 10m); StepTimeout
	// one prepare, perform, reset or reboot call (default 25m, under the
	// controller's default --state-timeout of 30m, so the agent's reason
	// comes first). A host call that hangs past it (an update lock held by
	// another command, a command that never exits) ends the intent in
	// error with the reason.
	CheckTimeout, StepTimeout time.Duration
	MetricsAddr               string
	// HealthAddr serves /healthz and /readyz (probes.go; "" = off);
	// HealthAllowance is how long the loop may go without a beat (default
	// agentAllowance).
	HealthAddr      string
	HealthAllowance time.Duration
	Log             *slog.Logger
}

// agent is one running agent.
type agent struct {
	o         AgentOptions
	keys      Keys
	kube      *kube.Clientset
	ev        events
	m         *metrics
	poke      chan struct{}
	moved     chan struct{} // every informer event: readNode waits on it for its own write
	booted    bool          // a first reconcile ran in this process
	lastCheck time.Time     // of the resting stabilize check
	lastError string        // the last bad-input error reported
	reported  string        // the last reason this agent wrote (its own error)
	// store is the informer's cache of this Node; written the resource
	// version of the agent's own last write (a turn reads the cache only
	// once it holds that write: readNode).
	store   cache.Store
	written int64
}

// RunAgent runs the agent of one node until ctx ends. It acts only on the
// intents the controller writes on its own Node.
func RunAgent(ctx context.Context, o AgentOptions) error {
	a, err := newAgent(o)
	if err != nil {
		return err
	}
	if err := a.m.serve(ctx, a.o.MetricsAddr, a.o.Log); err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	probe := health.New()
	beat := probe.Loop("reconcile", a.o.HealthAllowance)
	if err := serveProbes(ctx, a.o.HealthAddr, probe, a.o.Log); err != nil {
		return fmt.Errorf("--health-addr: %w", err)
	}
	defer a.ev.flush()
	inf := nodeInformer(a.kube, o.NodeName)
	probe.ReadyWhen("the Node informer synced", inf.HasSynced)
	poke := func(any) { a.trigger(); signal(a.moved) }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, n any) { poke(n) }}); err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	a.store = inf.GetStore()
	tick := time.NewTicker(min(a.o.Resync, a.o.CheckInterval))
	defer tick.Stop()
	for {
		beat()
		if err := a.reconcile(ctx); err != nil && ctx.Err() == nil {
			a.o.Log.Error("reconcile", "node", o.NodeName, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.poke:
		case <-tick.C:
		}
	}
}

func newAgent(o AgentOptions) (*agent, error) {
	switch {
	case o.Config == nil:
		return nil, errors.New("no Kubernetes configuration: pass --kubeconfig or run in a pod")
	case o.NodeName == "":
		return nil, errors.New("no node name: set NODE_NAME from the downward API (spec.nodeName) or pass --node-name")
	case o.Platform == nil:
		return nil, errors.New("no platform: pass --platform")
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = 30 * time.Minute
	}
	if o.Resync <= 0 {
		o.Resync = time.Minute
	}
	if o.CheckTimeout <= 0 {
		o.CheckTimeout = 10 * time.Minute
	}
	if o.StepTimeout <= 0 {
		o.StepTimeout = 25 * time.Minute
	}
	if o.HealthAllowance <= 0 {
		o.HealthAllowance = agentAllowance(o)
	}
	if o.BootID == nil {
		o.BootID = hostBootID
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	o.Log = o.Log.With("node", o.NodeName)
	keys, err := NewKeys(o.Prefix)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(o.Config)
	cfg.UserAgent = componentAgent
	c, err := kube.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &agent{o: o, keys: keys, kube: c, m: newMetrics(), poke: make(chan struct{}, 1), moved: make(chan struct{}, 1),
		ev: newEvents(c, componentAgent, o.NodeName, o.Log)}, nil
}

func (a *agent) trigger() { signal(a.poke) }

// reconcile reads the Node and carries out the intent it names, if it is
// not carried out yet.
func (a *agent) reconcile(ctx context.Context) error {
	n, err := a.readNode(ctx)
	if err != nil {
		return err
	}
	first := !a.booted
	a.booted = true
	a.ev.remember(n)
	ann := n.Annotations
	// trust: uo.node.action-wanted
	wanted, err := ParseIntent(ann[a.keys.Wanted()])
	if err != nil {
		return a.badInput(ctx, fmt.Errorf("held: annotation %s: %w", a.keys.Wanted(), err))
	}
	active, aerr := ParseIntent(ann[a.keys.Active()])
	state, serr := ParseState(ann[a.keys.State()])
	unreadable := aerr != nil || serr != nil // its own keys: carried out again, written anew
	if active == IntentReboot && state == StateBusy && ann[a.keys.Key(KeyRebootBootID)] == "" && !unreadable {
		return a.oldReboot(ctx, n) // the old operator's acknowledgement: rebooted already, or not yet?
	}
	if active == IntentReboot && state == StateRebooting {
		boot, err := a.o.BootID(ctx)
		if err != nil {
			return fmt.Errorf("read the host's boot ID: %w", err)
		}
		if boot != ann[a.keys.Key(KeyRebootBootID)] {
			return a.back(ctx)
		}
		if !first && wanted == IntentReboot {
			return nil // the reboot is on its way (a new intent, e.g. reset-state after a timeout, is carried out)
		}
	}
	if unreadable && wanted == IntentReboot {
		// Whether it rebooted already cannot be told: never reboot on a
		// value that cannot be read (the node may be back and serving).
		return a.badInput(ctx, fmt.Errorf("held: %w", errors.Join(aerr, serr)))
	}
	a.lastError = "" // readable again: a next bad value is reported anew
	switch {
	case wanted == IntentUnknown:
		// The controller has not spoken yet: it speaks only to labelled
		// nodes and to nodes whose agent reported, so the agent reports first.
		if time.Since(a.lastCheck) >= a.o.CheckInterval {
			return a.check(ctx, n, false)
		}
		return nil
	case wanted != active, unreadable, first && (state == StateBusy || state == StateRefreshing || state == StateRebooting):
		return a.carryOut(ctx, n, wanted)
	case wanted == IntentStabilize && time.Since(a.lastCheck) >= a.o.CheckInterval:
		return a.check(ctx, n, false)
	}
	return nil
}

// badInput reports an annotation the agent cannot act on: the reason and
// an Event, once per distinct error; nothing is carried out and no state
// written over (the node is held until the value is fixed).
func (a *agent) badInput(ctx context.Context, err error) error {
	if err.Error() == a.lastError {
		return nil
	}
	a.lastError, a.reported = err.Error(), err.Error()
	a.o.Log.Error("cannot act on my node's annotations", "err", err)
	a.ev.emit(ctx, a.o.NodeName, corev1.EventTypeWarning, ReasonAgentError, "%v", err)
	return a.patch(ctx, nil, map[string]any{a.keys.Key(KeyReason): err.Error()})
}

// carryOut acknowledges an intent (active = wanted, state busy), runs it,
// and reports ready or error.
func (a *agent) carryOut(ctx context.Context, n *corev1.Node, i Intent) error {
	a.o.Log.Info("carrying out", "intent", i)
	if i == IntentStabilize {
		return a.check(ctx, n, true)
	}
	if i == IntentReboot {
		return a.reboot(ctx, n)
	}
	// perform-update (an atomic swap, idempotent) is acknowledged with its
	// result in one write; a longer intent reports busy, the host call
	// starting while that write is on its way (prepare and reset are
	// idempotent and not disruptive; the result is written only after the
	// acknowledgement). An agent stopped before its write carries the
	// intent out again when it starts.
	acked := make(chan error, 1)
	mine := a.ownReason(n)
	if i != IntentPerform {
		go func() {
			acked <- a.report(ctx, a.clearing(mine, map[string]any{a.keys.Active(): string(i), a.keys.State(): string(StateBusy)}))
		}()
	} else {
		acked <- nil
	}
	var more map[string]any
	err := a.bounded(ctx, string(i), a.o.StepTimeout, "--step-timeout", func(ctx context.Context) error {
		switch i {
		case IntentPrepare:
			return a.o.Platform.Prepare(ctx)
		case IntentPerform:
			return a.o.Platform.Perform(ctx)
		case IntentReset: // discard the failed update's prepared host state; the next stabilize checks again
			more = map[string]any{a.keys.Key(KeyRebootBootID): nil}
			if err := a.o.Platform.Reset(ctx); err != nil {
				return fmt.Errorf("reset the host's prepared update: %w", err)
			}
		}
		return nil
	})
	if aerr := <-acked; aerr != nil {
		return aerr // not acknowledged: the next turn carries it out again
	}
	if err == nil && (i == IntentPrepare || i == IntentPerform) {
		for k, v := range a.untargeted(ctx, n) {
			if more == nil {
				more = map[string]any{}
			}
			more[k] = v
		}
	}
	return a.done(ctx, i, err, a.clearing(mine, more))
}

// bounded runs one host call under a deadline of timeout; a call still
// running at it is an error that says so (and names flag), not a wait
// for ever.
func (a *agent) bounded(ctx context.Context, what string, timeout time.Duration, flag string, call func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := call(cctx)
	if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s not done after %s (%s): the host call hung (an update lock held by another command, or a command that never exits): %w",
			what, timeout, flag, err)
	}
	return err
}

// ownReason reports whether the reason on n is the agent's own, an error
// it reported (this process wrote it, or the node still shows it beside
// the failed intent, not yet answered): the agent's next write removes it.
// Any other reason is the controller's (a failure counted, a hold, a
// rollout that moved on past --health-timeout) and stays until the
// controller ends it: it says why the node is where it is.
func (a *agent) ownReason(n *corev1.Node) bool {
	r := n.Annotations[a.keys.Key(KeyReason)]
	if r == "" {
		return false
	}
	failed := n.Annotations[a.keys.State()] == string(StateError) && n.Annotations[a.keys.Active()] == n.Annotations[a.keys.Wanted()]
	return r == a.reported || failed
}

// clearing adds the reason's removal to ann when the reason is the agent's own.
func (a *agent) clearing(mine bool, ann map[string]any) map[string]any {
	if !mine {
		return ann
	}
	if ann == nil {
		ann = map[string]any{}
	}
	ann[a.keys.Key(KeyReason)] = nil
	return ann
}

// done reports the end of an intent: ready (with more annotations), or
// error with the reason and an Event.
func (a *agent) done(ctx context.Context, i Intent, err error, more map[string]any) error {
	if ctx.Err() != nil {
		return ctx.Err() // stopped: the next start carries it out again
	}
	ann := map[string]any{a.keys.Active(): string(i), a.keys.State(): string(StateReady)}
	for k, v := range more {
		ann[k] = v
	}
	result := "ok"
	if err != nil {
		result = "error"
		a.o.Log.Error("intent failed", "intent", i, "err", err)
		ann[a.keys.State()], ann[a.keys.Key(KeyReason)] = string(StateError), err.Error()
		a.reported = err.Error()
		a.ev.emit(ctx, a.o.NodeName, corev1.EventTypeWarning, ReasonAgentError, "%s failed: %v", i, err)
	}
	a.m.intents.WithLabelValues(string(i), result).Inc()
	return a.report(ctx, ann)
}

func (a *agent) report(ctx context.Context, ann map[string]any) error {
	return a.patch(ctx, nil, ann)
}

// check asks the platform for updates and publishes what it found; ack
// first marks the intent carried out (stabilize), else only changes are written.
func (a *agent) check(ctx context.Context, n *corev1.Node, ack bool) error {
	a.lastCheck = time.Now()
	var st platform.Status
	err := a.bounded(ctx, "the check for updates", a.o.CheckTimeout, "--check-timeout", func(ctx context.Context) (err error) {
		st, err = a.o.Platform.Check(ctx)
		return err
	})
	if err != nil {
		return a.done(ctx, IntentStabilize, fmt.Errorf("check for updates: %w", err), nil)
	}
	mine := a.ownReason(n)
	state, avail := StateUpToDate, "false"
	if st.Available != "" {
		state, avail = StateUpdateAvailable, "true"
	}
	ann := map[string]any{a.keys.Active(): string(IntentStabilize), a.keys.State(): string(state), a.keys.UpdateAvailable(): avail,
		a.keys.Key(KeyCurrentVersion): st.Current, a.keys.Key(KeyAvailableVersion): st.Available, a.keys.Key(KeyStagedVersion): st.Staged}
	a.clearing(mine, ann)
	changed := ack || n.Labels[a.keys.UpdateAvailable()] != avail
	for k, v := range ann {
		if s, _ := v.(string); n.Annotations[k] != s {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	for _, k := range []string{KeyAvailableVersion, KeyStagedVersion} {
		if ann[a.keys.Key(k)] == "" {
			ann[a.keys.Key(k)] = nil
		}
	}
	a.m.intents.WithLabelValues(string(IntentStabilize), "ok").Inc()
	return a.patch(ctx, map[string]any{a.keys.UpdateAvailable(): avail}, ann)
}

// reboot records the boot ID, reports rebooting, and asks for the reboot.
func (a *agent) reboot(ctx context.Context, n *corev1.Node) error {
	boot, err := a.o.BootID(ctx)
	if err != nil {
		return a.done(ctx, IntentReboot, fmt.Errorf("read the host's boot ID before the reboot: %w", err), nil)
	}
	err = a.report(ctx, a.clearing(a.ownReason(n), map[string]any{a.keys.Active(): string(IntentReboot), a.keys.State(): string(StateRebooting),
		a.keys.Key(KeyRebootBootID): boot}))
	if err != nil {
		return err
	}
	a.o.Log.Info("rebooting")
	if err := a.bounded(ctx, "the reboot call", a.o.StepTimeout, "--step-timeout", a.o.Platform.Reboot); err != nil {
		// A host going down stops the agent's container, the reboot
		// command with it (SIGTERM to each process): the command can fail
		// a moment before the agent sees its own stop. Reported at once,
		// that failure would free the node's slot while it reboots: it is
		// reported only if the agent still runs rebootGrace later.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(rebootGrace):
		}
		return a.done(ctx, IntentReboot, err, nil)
	}
	return nil
}

// untargeted reads the host's versions for an update under way that has
// no target-version (the old operator started it): the controller adopts
// the version it brings as the target (AdoptedTarget). nil for an update
// with a target, or when the host cannot be read (the update goes on; only
// its target stays unknown).
func (a *agent) untargeted(ctx context.Context, n *corev1.Node) map[string]any {
	// trust: uo.node.target-version
	if n.Annotations[a.keys.Key(KeyTargetVersion)] != "" {
		return nil
	}
	var st platform.Status
	err := a.bounded(ctx, "the check for updates", a.o.CheckTimeout, "--check-timeout", func(ctx context.Context) (err error) {
		st, err = a.o.Platform.Check(ctx)
		return err
	})
	if err != nil {
		a.o.Log.Warn("read the host's versions for an update without a target", "err", err)
		return nil
	}
	return a.versions(st)
}

// versions are the version annotations of st.
func (a *agent) versions(st platform.Status) map[string]any {
	return map[string]any{a.keys.Key(KeyCurrentVersion): st.Current, a.keys.Key(KeyAvailableVersion): nilIfEmpty(st.Available),
		a.keys.Key(KeyStagedVersion): nilIfEmpty(st.Staged)}
}

// hostBootID reads the kernel's boot ID.
var hostBootID = BootIDFile(platform.DefaultBootIDFile)

// BootIDFile reads the boot ID from path (the kernel's is
// platform.DefaultBootIDFile).
func BootIDFile(path string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("read the boot ID: %w", err)
		}
		id := strings.TrimSpace(string(b))
		if id == "" {
			return "", fmt.Errorf("the boot ID file %s is empty", path)
		}
		return id, nil
	}
}

// rebootGrace is how long a failed reboot call waits for the agent's own
// stop (the host going down) before it is reported as a failure.
const rebootGrace = 5 * time.Second

// back reports a finished reboot: ready, at the version now running.
func (a *agent) back(ctx context.Context) error {
	var v string
	err := a.bounded(ctx, "reading the version", a.o.CheckTimeout, "--check-timeout", func(ctx context.Context) (err error) {
		v, err = a.o.Platform.Version(ctx)
		return err
	})
	if err != nil {
		return a.done(ctx, IntentReboot, fmt.Errorf("read the version after the reboot: %w", err), nil)
	}
	a.o.Log.Info("back after the reboot", "version", v)
	a.ev.emit(ctx, a.o.NodeName, corev1.EventTypeNormal, ReasonAgentState, "rebooted into %s", v)
	return a.done(ctx, IntentReboot, nil, map[string]any{a.keys.Key(KeyCurrentVersion): v, a.keys.Key(KeyAvailableVersion): nil,
		a.keys.Key(KeyStagedVersion): nil, a.keys.Key(KeyRebootBootID): nil})
}

// oldReboot takes over a reboot-update the old operator (dogswatch, Go
// brupop) acknowledged with busy: it recorded no boot ID, so whether the
// host rebooted is read from the host itself: an update activated for the
// next boot (staged) is the reboot still to come, carried out now;
// nothing staged, the node is back (reported ready, never rebooted a
// second time), even when a newer release is listed already.
func (a *agent) oldReboot(ctx context.Context, n *corev1.Node) error {
	var st platform.Status
	err := a.bounded(ctx, "the check for updates", a.o.CheckTimeout, "--check-timeout", func(ctx context.Context) (err error) {
		st, err = a.o.Platform.Check(ctx)
		return err
	})
	if err != nil {
		return a.done(ctx, IntentReboot, fmt.Errorf("read the host after the old operator's reboot-update: %w", err), nil)
	}
	// trust: uo.node.target-version
	if st.Staged != "" && n.Annotations[a.keys.Key(KeyTargetVersion)] == "" { // what the reboot is to bring: the controller adopts it as the target
		if err := a.report(ctx, a.versions(st)); err != nil {
			return err
		}
	}
	if st.Staged == "" { // nothing activated for the next boot: rebooted already (a newer release listed is the next update's)
		a.o.Log.Info("the old operator's reboot happened already", "version", st.Current, "available", st.Available)
		return a.back(ctx)
	}
	return a.reboot(ctx, n)
}

package chaos

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/monitor"
)

// system is one of slipway's systems as a run drives it.
type system interface {
	// spec is what its faults may hit.
	spec(o Options, nodes []string) faults.Spec
	// nodeCommand is each fake node's command and its environment.
	nodeCommand(h *harness) (cmd []string, env []string, err error)
	// setup prepares the cluster before the node commands start (its
	// objects, labels) and starts the controller replicas (h.startProc
	// with the kubeconfigs h.kubeconfig names).
	setup(ctx context.Context, h *harness, kc kubernetes.Interface) error
	// limits are the monitor's bounds for it.
	limits() monitor.Limits
	// start waits for the system's steady state and starts the change the
	// faults run against (a rollout).
	start(ctx context.Context, h *harness) error
	// settled reports whether the change ended, with where it ended.
	settled(ctx context.Context, h *harness) (ok bool, outcome string)
}

// extraProcs is a system whose fault targets include processes the
// runner does not start itself (workers that follow their pods): Kill and
// Pause reach them through these.
type extraProcs interface {
	faultProcs() map[string]faults.Proc
}

// stopper is a system with processes of its own to stop at the end of a
// run (before the cluster goes).
type stopper interface {
	stop()
}

// monitored is a system that configures the monitor beyond its limits
// (e.g. the swarm applications' reports) and tells it, once the faults
// are over, what must hold from then on.
type monitored interface {
	monitorConfig(cfg *monitor.Config)
	faultsOver(mon *monitor.Monitor)
}

// variantStarter is a system whose variants add a step once its change
// has started (kept in a file of their own), until the run ends.
type variantStarter interface {
	startVariant(ctx context.Context, h *harness) (stop func(), err error)
}

// jobsSystem is a system whose every job must run within a bound once
// the faults are over (the pool settled): the runner tells its own
// monitor and the monitor process (the jobs-due file).
type jobsSystem interface {
	expectedJobs() (jobs []string, due time.Time)
}

// appsSystem is a system whose applications report what they run in
// files: the monitor process reads every file named name under dir.
type appsSystem interface {
	appReports(h *harness) (dir, name string)
}

// harness is one run's shared state.
type harness struct {
	o     Options
	dir   string
	kcDir string
	nodes []string
	env   *testenv.Env
	// admin is the API server's admin config, from setup on.
	admin   *rest.Config
	proxies map[string]*faults.Proxy
	procs   map[string]*proc
	logf    func(format string, a ...any)
}

// kubeconfig is the path of the kubeconfig that reaches the API server
// through target's proxy.
func (h *harness) kubeconfig(target string) string {
	return filepath.Join(h.kcDir, strings.ReplaceAll(target, "/", "-"))
}

// startProc starts a runner process (a controller replica) named target.
func (h *harness) startProc(target string, argv ...string) error {
	p := newProc(target, filepath.Join(h.dir, strings.ReplaceAll(target, "/", "-")+".log"), argv...)
	p.env = []string{faults.ClockEnv(h.clockFile(target))}
	if err := p.start(); err != nil {
		return err
	}
	h.procs[target] = p
	return nil
}

// clockFile is the clock step file of target, a runner process: a
// ClockStep fault writes its step there (faults.Sim.Clocks).
func (h *harness) clockFile(target string) string {
	return filepath.Join(h.dir, "clock-"+strings.ReplaceAll(target, "/", "-"))
}

// controllers are the controller replicas of every run, each behind a
// proxy; one holds the leader's Lease.
var controllers = []string{"controller/a", "controller/b"}

// runSystem runs sys under o's schedule with the monitor watching.
func runSystem(ctx context.Context, o Options, sys system) (res Result, err error) {
	start := time.Now()
	h := &harness{o: o, nodes: NodeNames(o.Nodes), proxies: map[string]*faults.Proxy{}, procs: map[string]*proc{}}
	h.logf = func(format string, a ...any) { fmt.Fprintf(o.Log, "chaos "+o.System+": "+format+"\n", a...) }
	res = Result{System: o.System, Seed: o.Seed, Name: o.Name, ScheduleFile: o.ScheduleFile, Nodes: o.Nodes, Duration: o.Duration, Kinds: o.Kinds, Schedule: o.Schedule}
	if res.Schedule == nil {
		if res.Schedule, err = drawSchedule(o, sys, h.nodes); err != nil {
			return res, err
		}
	} else if err := checkSchedule(o.System, res.Schedule); err != nil {
		return res, err
	}
	if h.dir, err = os.MkdirTemp("", "slipway-chaos-"+o.System+"-"); err != nil {
		return res, err
	}
	defer func() {
		if o.Keep || (err == nil && res.Failed()) {
			res.Dir = h.dir
			return
		}
		_ = os.RemoveAll(h.dir)
	}()
	h.kcDir = filepath.Join(h.dir, "kubeconfigs")
	for _, d := range []string{h.kcDir, filepath.Join(h.dir, "env")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return res, err
		}
	}
	defer func() {
		for _, p := range h.procs {
			p.stop(10 * time.Second)
		}
		for _, p := range h.proxies {
			_ = p.Close()
		}
	}()
	simLog, err := os.Create(filepath.Join(h.dir, "sim.log"))
	if err != nil {
		return res, err
	}
	defer simLog.Close()
	cmd, cmdEnv, err := sys.nodeCommand(h)
	if err != nil {
		return res, err
	}
	setup := func(ctx context.Context, cfg *rest.Config) error {
		h.admin = cfg
		kc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		targets := append([]string{}, controllers...)
		for _, n := range h.nodes {
			targets = append(targets, "agent/"+n)
		}
		for _, t := range targets {
			p, err := faults.NewProxy("127.0.0.1:0", strings.TrimPrefix(cfg.Host, "https://"))
			if err != nil {
				return err
			}
			h.proxies[t] = p
			if err := writeKubeconfig(h.kubeconfig(t), cfg, "https://"+p.Addr()); err != nil {
				return err
			}
		}
		if err := guardedWorkload(ctx, kc); err != nil {
			return err
		}
		return sys.setup(ctx, h, kc)
	}
	h.env, err = testenv.Start(ctx, testenv.Options{
		Cluster: true, Nodes: o.Nodes, CRDs: crds.Must(), ToolsDir: o.ToolsDir, Dir: filepath.Join(h.dir, "env"), Timeout: 5 * time.Minute,
		ExecPath: o.Bin + ":/usr/local/bin:/usr/bin:/bin", NodeCommand: cmd, NodeEnv: append(cmdEnv, "CHAOS_KUBECONFIGS="+h.kcDir, faults.ClockStepEnv),
		Logger: slog.New(slog.NewTextHandler(simLog, nil)), Log: simLog, Setup: setup, AuditLog: filepath.Join(h.dir, "audit.log"),
		AuditGets: liveReads,
	})
	if err != nil {
		return res, fmt.Errorf("start the simulated cluster: %w", err)
	}
	defer h.env.Stop()
	if st, ok := sys.(stopper); ok {
		defer st.stop()
	}
	h.logf("cluster up in %s", time.Since(start).Round(time.Second))
	kc, err := kubernetes.NewForConfig(h.env.Config)
	if err != nil {
		return res, err
	}
	// The monitor as a process too, beside the one in this process: what
	// it costs (CPU, memory, API requests), and a second opinion that
	// counts: what it alone reports is judged with the run's excuses
	// (judgeProcess) and fails the run.
	lim := sys.limits()
	monLog := filepath.Join(h.dir, "monitor.log")
	monArgs := []string{"monitor", "--kubeconfig", h.env.Kubeconfig,
		"--out", filepath.Join(h.dir, "monitor.jsonl"), "--max-in-flight", fmt.Sprint(lim.OperatorMaxConcurrent),
		"--operator-state-timeout", lim.OperatorStateTimeout.String()}
	if _, ok := sys.(hostSystem); ok {
		monArgs = append(monArgs, "--hosts", h.env.NodesRoot) // the hosts' files too: a second opinion on the system's own host checks
	}
	monArgs = append(monArgs, "--audit-log", filepath.Join(h.dir, "audit.log")) // bounded-write-requests, as the runner's own monitor
	if a, ok := sys.(appsSystem); ok {
		dir, name := a.appReports(h)
		monArgs = append(monArgs, "--apps", dir, "--app-report", name) // what the applications report: swarm-no-double-holder
	}
	jobsDueFile := filepath.Join(h.dir, "jobs-due.json")
	if _, ok := sys.(jobsSystem); ok {
		monArgs = append(monArgs, "--jobs-due", jobsDueFile) // swarm-every-job-running, once the runner says the pool settled
	}
	monProc := newProc("monitor", monLog, append([]string{filepath.Join(o.Bin, "slipway-sim")}, monArgs...)...)
	if err := monProc.start(); err != nil {
		return res, err
	}
	defer monProc.stop(10 * time.Second)
	mctx, stopMonitor := context.WithCancel(ctx)
	defer stopMonitor()
	mcfg := monitor.Config{Limits: lim, AuditLog: filepath.Join(h.dir, "audit.log")}
	if m, ok := sys.(monitored); ok {
		m.monitorConfig(&mcfg)
	}
	mon, err := monitor.New(mcfg)
	if err != nil {
		return res, err
	}
	if err := mon.Run(mctx, h.env.Config); err != nil {
		return res, err
	}
	if err := sys.start(ctx, h); err != nil {
		return res, err
	}
	if v, ok := sys.(variantStarter); ok {
		stop, err := v.startVariant(ctx, h)
		if err != nil {
			return res, err
		}
		defer stop()
	}
	h.logf("steady after %s; the change starts under %d faults", time.Since(start).Round(time.Second), len(res.Schedule))
	sim := &faults.Sim{Env: h.env, Client: kc, Proxies: h.proxies, Procs: map[string]faults.Proc{}, Clocks: map[string]string{}}
	for n, p := range h.procs {
		sim.Procs[n] = p
		sim.Clocks[n] = h.clockFile(n)
	}
	if x, ok := sys.(extraProcs); ok {
		maps.Copy(sim.Procs, x.faultProcs())
	}
	if hs, ok := sys.(hostSystem); ok {
		hs.hostFaults(h, sim)
	}
	faultsStart := time.Now()
	res.Faults = faults.Run(ctx, res.Schedule, sim, func(l string) { h.logf("%s", l) })
	res.Strikes = sim.Strikes()
	h.logf("faults over after %s; waiting for the change to settle", time.Since(start).Round(time.Second))
	if m, ok := sys.(monitored); ok {
		m.faultsOver(mon)
	}
	if j, ok := sys.(jobsSystem); ok {
		jobs, due := j.expectedJobs()
		mon.ExpectJobs(jobs, due)
		if err := monitor.WriteJobsDue(jobsDueFile, monitor.JobsDue{Jobs: jobs, Due: due}); err != nil {
			return res, err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, o.Settle)
	for {
		ok, outcome := sys.settled(sctx, h)
		res.Settled, res.Outcome = ok, outcome
		if ok || sctx.Err() != nil {
			break
		}
		select {
		case <-sctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	cancel()
	if !res.Settled && ctx.Err() == nil {
		// Where it stood when the budget ran out (the last look may have
		// been cut by the budget itself).
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		_, res.Outcome = sys.settled(octx, h)
		ocancel()
		res.Unsettled = res.Outcome
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	// A last check once quiet, then the monitor's findings.
	mon.Tick()
	if res.Settled {
		mon.CheckQuiet()
	}
	res.Checks, res.MonitorErrors = mon.Checks(), mon.Errors()
	excused := res.excuser(faultsStart, filepath.Join(h.dir, "audit.log"))
	for _, v := range mon.Violations() {
		if excused(v) {
			res.Excused = append(res.Excused, v)
		} else {
			res.Violations = append(res.Violations, v)
		}
	}
	if hs, ok := sys.(hostSystem); ok {
		hv, err := hs.hostViolations(res.Settled)
		res.Violations = append(res.Violations, hv...)
		if err != nil {
			res.MonitorErrors = append(res.MonitorErrors, err)
		}
	}
	res.Wall = time.Since(start)
	monProc.stop(10 * time.Second)
	res.MonitorProcess = lastLine(monLog, "checks,")
	// The process's findings count: judged with the excuses only the run
	// knows (the faults' schedule and strikes).
	if err := judgeProcess(&res, filepath.Join(h.dir, "monitor.jsonl"), excused); err != nil {
		res.MonitorErrors = append(res.MonitorErrors, err)
	}
	if err := writeViolations(filepath.Join(h.dir, "violations.jsonl"), append(res.Violations, res.Excused...)); err != nil {
		return res, err
	}
	return res, nil
}

// liveReads are the reads the audit log keeps beside the writes: the
// service accounts' (the controllers'; the agents act as admin,
// impersonating theirs) gets and lists of Nodes and UpdateChannels, what
// a controller reads live before a cordon (raceExcuse).
var liveReads = []testenv.AuditGets{
	{UserGroups: []string{"system:serviceaccounts"}, Resources: []string{"nodes"}},
	{UserGroups: []string{"system:serviceaccounts"}, Group: "ops.slipway.dev", Resources: []string{"updatechannels"}},
}

// excuser is the run's judgement of a violation (its faults from
// faultsStart, its audit log at auditLog): whether a fault explains it
// (Excused, excusedReboot, raceExcuse), recording why in r.ExcusedWhy.
// The audit log is read once, at the first cordon rule's violation; a
// log that cannot be read excuses none (r.MonitorErrors says why).
func (r *Result) excuser(faultsStart time.Time, auditLog string) func(monitor.Violation) bool {
	var audit []testenv.AuditEvent
	read := false
	downs := faultDowns(r.Schedule, r.Strikes, faultsStart)
	return func(v monitor.Violation) bool {
		if Excused(v, r.Schedule, r.Strikes, faultsStart) || excusedReboot(v, r.Strikes) {
			return true
		}
		if v.Invariant != monitor.InvCordonBudget && v.Invariant != monitor.InvCordonControlPlane {
			return false
		}
		if !read {
			read = true
			var err error
			for try := 0; try < 3; try++ { // a batch being written may end in half a line
				if audit, err = testenv.ReadAuditAll(auditLog); err == nil || errors.Is(err, fs.ErrNotExist) {
					break
				}
				time.Sleep(time.Second)
			}
			if err != nil {
				r.MonitorErrors = append(r.MonitorErrors, fmt.Errorf("judge the cordons that raced a down: %w", err))
				audit = nil
			}
		}
		why, ok := raceExcuse(v, audit, downs)
		if ok {
			if r.ExcusedWhy == nil {
				r.ExcusedWhy = map[string]string{}
			}
			r.ExcusedWhy[excuseKey(v)] = why
		}
		return ok
	}
}

// lastLine is the last line of the file at path that contains sub.
func lastLine(path, sub string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return strings.TrimSpace(lines[i])
		}
	}
	return ""
}

// reboots counts the simulated reboots since the nodes' first boot.
func reboots(env *testenv.Env, nodes []string) int {
	n := 0
	for _, node := range nodes {
		n += max(env.Supervisor.Boots(node)-1, 0)
	}
	return n
}

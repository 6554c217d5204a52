package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"slipway.dev/slipway/ops/swarm/appcheck"
	"slipway.dev/slipway/ops/testenv/monitor"
)

// monitorCmd runs the invariant monitor as a process of its own against an
// API server until SIGTERM or SIGINT (or --for), writing each violation as
// one JSON line when it is found; at the end it prints its checks, its
// violations and its own cost to stderr, and fails when it found any.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func monitorCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("monitor", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the API server to watch (default $KUBECONFIG)")
	out := fs.String("out", "", "file the violations are appended to as JSON lines (default stdout)")
	maxInFlight := fs.Int("max-in-flight", 0, "the update operator's --max-concurrent (0: that invariant is not checked)")
	stateTimeout := fs.Duration("operator-state-timeout", 0, "the update operator's --state-timeout (the longer of it and --drain-timeout; 0: no node's slot held while NotReady is judged)")
	prefix := fs.String("operator-prefix", "", "the update operator's annotation prefix (default update.slipway.dev)")
	apps := fs.String("apps", "", "directory of swarm applications' report files (<dir>/<app>/report... : every file under it is one application, or only those named --app-report)")
	appReport := fs.String("app-report", "", "with --apps, the name of an application's report file (other files under --apps are not read; default: every file)")
	auditLog := fs.String("audit-log", "", "the API server's JSON audit log: check bounded-write-requests (write requests per object, refused ones included) from it")
	maxWrites := fs.Int("max-writes", 0, "most versions of one object per --window (default 20)")
	window := fs.Duration("window", 0, "the window of --max-writes (default 1s)")
	hosts := fs.String("hosts", "", "the simulated nodes' root (<dir>/<node>/...): check the k3os hosts' files too (mixed-boot, staged-without-slot)")
	hostsGrace := fs.Duration("hosts-grace", 0, "how long a node without a slot may have another next boot than the one it runs (default 90s)")
	jobsDue := fs.String("jobs-due", "", "with --apps, a file the runner writes once the swarm's pool settled ({\"jobs\":[...],\"due\":\"<RFC 3339>\"}): from due on every job must run in some application (swarm-every-job-running)")
	runFor := fs.Duration("for", 0, "stop after this long (0: at SIGTERM or SIGINT)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" {
		return fmt.Errorf("monitor: --kubeconfig or $KUBECONFIG is required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("monitor: %w", err)
	}
	cfg.UserAgent = "slipway-sim/monitor"
	var requests atomic.Int64 // every API request the monitor makes (lists and watches: it never polls)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			requests.Add(1)
			return rt.RoundTrip(r)
		})
	}
	var w io.Writer = os.Stdout
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("monitor: --out: %w", err)
		}
		defer f.Close()
		w = f
	}
	mc := monitor.Config{OperatorPrefix: *prefix, Limits: monitor.Limits{OperatorMaxConcurrent: *maxInFlight, OperatorStateTimeout: *stateTimeout, MaxWrites: *maxWrites, Window: *window},
		Hosts: *hosts, HostsGrace: *hostsGrace, AuditLog: *auditLog}
	if *apps != "" {
		mc.Apps = reportsUnder(*apps, *appReport)
	}
	if *jobsDue != "" && *apps == "" {
		return fmt.Errorf("monitor: --jobs-due is judged on what the applications report: give --apps DIR too")
	}
	if *appReport != "" && *apps == "" {
		return fmt.Errorf("monitor: --app-report names the report files under --apps: give --apps DIR too")
	}
	m, err := monitor.New(mc)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	start := time.Now()
	if err := m.Run(ctx, cfg); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "slipway-sim monitor: watching %s\n", cfg.Host)
	if *jobsDue != "" {
		go m.ExpectJobsFrom(ctx, *jobsDue, 200*time.Millisecond)
	}
	written := 0
	flush := func() error {
		vs := m.Violations()
		for _, v := range vs[written:] {
			if err := monitor.WriteJSON(w, v); err != nil {
				return err
			}
		}
		written = len(vs)
		return nil
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		if err := flush(); err != nil {
			return fmt.Errorf("monitor: write a violation: %w", err)
		}
	}
	m.Tick()
	if err := flush(); err != nil {
		return fmt.Errorf("monitor: write a violation: %w", err)
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	fmt.Fprintf(os.Stderr, "slipway-sim monitor: %s: %d checks, %d host checks, %d violations, %d errors; %d API requests; cpu %s (%.2f%% of one core), max RSS %d MiB, Go heap %d MiB\n",
		time.Since(start).Round(time.Second), m.Checks(), m.HostChecks(), written, len(m.Errors()), requests.Load(), cpu.Round(time.Millisecond),
		100*cpu.Seconds()/time.Since(start).Seconds(), ru.Maxrss/1024, ms.HeapAlloc>>20)
	for _, e := range m.Errors() {
		fmt.Fprintf(os.Stderr, "slipway-sim monitor: check not made: %v\n", e)
	}
	if written > 0 {
		return fmt.Errorf("monitor: %d violations", written)
	}
	return nil
}

// reportsUnder reads, at each call, the swarm applications' report files
// under dir (those named name; "": every file), each file one application
// keyed by its path under dir. An application that stopped reports nothing
// running: its file stays, empty.
func reportsUnder(dir, name string) func() appcheck.Sample {
	return func() appcheck.Sample {
		paths := map[string]string{}
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && (name == "" || d.Name() == name) {
				key, _ := filepath.Rel(dir, p)
				paths[key] = p
			}
			return nil
		})
		return appcheck.ReadReports(paths)
	}
}

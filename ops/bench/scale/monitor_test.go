package scale

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"slipway.dev/slipway/ops/testenv"
)

// withMonitor is SLIPWAY_BENCH_MONITOR=1: the invariant monitor's process
// (`slipway-sim monitor`, docs/chaos.md) watches the rollout beside the
// contender, with the host checks of the real agents' nodes; the result
// line gets its violations (0 expected) and its cost. Its own requests and
// watches then count in the run's API and watch figures.
var withMonitor = os.Getenv("SLIPWAY_BENCH_MONITOR") == "1"

// monitorProc is the running monitor process.
type monitorProc struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	usage  *procUsage
	out    string
	exited chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startMonitor starts the monitor process against e, its violations
// written to a file in dir, and samples its CPU and memory every second.
func startMonitor(e *testenv.Env, dir string) (*monitorProc, error) {
	m := &monitorProc{stderr: &lockedBuffer{}, out: filepath.Join(dir, "monitor-violations.jsonl"), exited: make(chan error, 1)}
	m.cmd = exec.Command(filepath.Join(binDir, "slipway-sim"), "monitor", "--kubeconfig", e.Kubeconfig, "--out", m.out, "--hosts", e.NodesRoot)
	m.cmd.Stdout, m.cmd.Stderr = m.stderr, m.stderr
	if err := m.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the monitor process: %w", err)
	}
	go func() { m.exited <- m.cmd.Wait() }()
	pid := m.cmd.Process.Pid
	m.usage = sample(func() []int { return []int{pid} }, time.Second)
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(m.stderr.String(), "watching") { // its caches filled before the rollout starts
		select {
		case err := <-m.exited:
			return nil, fmt.Errorf("the monitor process ended at start (%v): %s", err, m.stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the monitor process did not start within 2 minutes: %s", m.stderr.String())
		}
	}
	return m, nil
}

// monitorSummary is the monitor process's last line: its checks,
// violations, API requests and CPU.
var monitorSummary = regexp.MustCompile(`(\d+) checks, (\d+) host checks, (\d+) violations, (\d+) errors; (\d+) API requests; cpu (\S+) \(([\d.]+)% of one core\), max RSS (\d+) MiB`)

// stop ends the monitor (SIGTERM) and returns its result-line fields: its
// summary's figures, its peak RSS, anonymous and PSS memory as sampled,
// and its violations (the lines it wrote, shown in the log when any).
func (m *monitorProc) stop(log func(string, ...any)) []string {
	cpu, rss, anon, pss, _ := m.usage.end()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(time.Minute):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
	kv := []string{fmt.Sprintf("monitor_cpu_s=%.1f", cpu.Seconds()), fmt.Sprintf("monitor_rss_mib=%.1f", rss),
		fmt.Sprintf("monitor_anon_mib=%.1f", anon), fmt.Sprintf("monitor_pss_mib=%.1f", pss)}
	g := monitorSummary.FindStringSubmatch(m.stderr.String())
	if g == nil {
		log("the monitor process printed no summary: %s", m.stderr.String())
		return append(kv, "monitor_violations=unknown")
	}
	kv = append(kv, "monitor_checks="+g[1], "monitor_host_checks="+g[2], "monitor_violations="+g[3], "monitor_errors="+g[4], "monitor_requests="+g[5])
	if g[3] != "0" {
		b, _ := os.ReadFile(m.out)
		log("the monitor process found %s violations:\n%s", g[3], b)
	}
	return kv
}

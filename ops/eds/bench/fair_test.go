package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/generated/eds/clientset/versioned"
	"slipway.dev/slipway/ops/testenv"
)

// The DaemonSet controller runs in kube-controller-manager at its
// defaults: --kube-api-qps 20, --kube-api-burst 30,
// --concurrent-daemonset-syncs 2. slipway eds runs twice per round: at
// those same limits (the comparison), and at its own defaults (50, 100,
// 4 workers; labelled as such). The order alternates each round.
var (
	kcmLimits = limits{qps: 20, burst: 30, workers: 2}
	edsLimits = limits{qps: 50, burst: 100, workers: 4}
)

type limits struct {
	qps, burst, workers int
}

func (l limits) String() string {
	return fmt.Sprintf("%d QPS / %d burst / %d workers", l.qps, l.burst, l.workers)
}

// contender is one line of the table: its runs, in order.
type contender struct {
	label  string
	limits limits
	walls  []time.Duration
	writes []float64 // per node
	quiet  []float64 // per node, without Events
}

func (c *contender) add(w window, n writeCount) {
	c.walls = append(c.walls, w.wall)
	c.writes = append(c.writes, float64(n.all)/float64(nodes))
	c.quiet = append(c.quiet, float64(n.noEvents)/float64(nodes))
}

func median[T int64 | float64 | time.Duration](xs []T) T {
	s := append([]T{}, xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func BenchmarkEDSVsDaemonSet(b *testing.B) {
	e := testenv.Need(b, env)
	c := clients{kube: kubernetes.NewForConfigOrDie(e.Config), eds: versioned.NewForConfigOrDie(e.Config)}
	bin := buildSlipway(b)
	stop := c.kubeletStandIn()
	defer stop()
	ds := &contender{label: "DaemonSet (kcm defaults)", limits: kcmLimits}
	equal := &contender{label: "slipway eds (kcm's limits)", limits: kcmLimits}
	own := &contender{label: "slipway eds (its defaults)", limits: edsLimits}
	var rss float64
	var pause time.Duration
	for range b.N {
		for round := range rounds {
			order := []*contender{ds, equal, own}
			if round%2 == 1 {
				order = []*contender{own, equal, ds}
			}
			for _, who := range order {
				if who == ds {
					w := c.rollDaemonSet(b)
					time.Sleep(2 * time.Second) // the audit log is written in 1 s batches
					who.add(w, countWrites(b, w, "kube-controller-manager"))
					continue
				}
				ctrl := startController(b, e, bin, who.limits)
				w := c.rollEDS(b)
				if who == own && round == rounds-1 {
					rss = rssMiB(ctrl.Process.Pid)
					pause = c.canaryPauseLatency(b)
				}
				stopController(ctrl)
				time.Sleep(2 * time.Second)
				who.add(w, countWrites(b, w, "slipway-eds-controller"))
			}
		}
		report(b, []*contender{ds, equal, own}, rss, pause)
	}
}

func report(b *testing.B, all []*contender, rss float64, pause time.Duration) {
	ds, equal, own := all[0], all[1], all[2]
	b.ReportMetric(median(equal.walls).Seconds()/median(ds.walls).Seconds(), "wall-eds/ds-equal-limits")
	b.ReportMetric(median(own.walls).Seconds()/median(ds.walls).Seconds(), "wall-eds/ds-own-defaults")
	b.ReportMetric(median(ds.writes), "writes/node-ds")
	b.ReportMetric(median(equal.writes), "writes/node-eds")
	b.ReportMetric(rss, "rss-eds-MiB")
	b.ReportMetric(pause.Seconds()*1000, "canary-pause-ms")
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\n%d nodes, maxUnavailable %d, canary off; %d rounds, order alternating; medians; load average %s", nodes, maxUnavailable, rounds, load)
	fmt.Printf("%-30s %-32s %9s %12s %18s  %s\n", "controller", "client limits", "wall", "writes/node", "(without Events)", "walls of the rounds")
	for _, c := range all {
		fmt.Printf("%-30s %-32s %8.1fs %12.2f %18.2f  %v\n", c.label, c.limits, median(c.walls).Seconds(), median(c.writes), median(c.quiet), rounded(c.walls))
	}
	fmt.Printf("wall eds/ds at equal limits %.2f; at each one's defaults %.2f\n",
		median(equal.walls).Seconds()/median(ds.walls).Seconds(), median(own.walls).Seconds()/median(ds.walls).Seconds())
	fmt.Printf("slipway eds RSS %.0f MiB; canary restarts over maxRestarts to Canary Paused: %v\n\n", rss, pause.Round(time.Millisecond))
}

func rounded(ws []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ws))
	for i, w := range ws {
		out[i] = w.Round(100 * time.Millisecond)
	}
	return out
}

// buildSlipway builds `slipway` from this checkout.
func buildSlipway(b *testing.B) string {
	bin := filepath.Join(b.TempDir(), "slipway")
	build := exec.Command("go", "build", "-o", bin, "slipway.dev/slipway/cmd/slipway")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		b.Fatalf("build slipway: %v", err)
	}
	return bin
}

// startController runs `slipway eds controller` as its own process (so its
// memory can be read) at the given client limits.
func startController(b *testing.B, e *testenv.Env, bin string, l limits) *exec.Cmd {
	logf, err := os.CreateTemp(b.TempDir(), "controller-*.log")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "eds", "controller", "--metrics-addr", "",
		"--kube-api-qps", strconv.Itoa(l.qps), "--kube-api-burst", strconv.Itoa(l.burst), "--workers", strconv.Itoa(l.workers))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.Kubeconfig)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the benchmark
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stopController(cmd); _ = logf.Close() })
	return cmd
}

func stopController(cmd *exec.Cmd) {
	if cmd.ProcessState == nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait() // sets ProcessState: a second stop does nothing
	}
}

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/testenv"
	uo "slipway.dev/slipway/ops/updateoperator"
)

var keys, _ = uo.NewKeys("")

// BenchmarkUpdateOperator rolls a new release through the fake nodes once
// per round (see rounds: by default max-concurrent 10 with 2 s + 3 s and
// with 5 s + 15 s of host time, each plain and with --prepare-ahead, then
// max-concurrent 1 through 10 nodes) and reports the wall time against the
// ideals, the API writes per node by writer (audit log) and the
// controller's and agents' resident memory.
//
//	go test ./ops/updateoperator/e2e -run '^$' -bench . -benchtime 1x
func BenchmarkUpdateOperator(b *testing.B) {
	e := testenv.Need(b, env)
	c, err := kube.NewForConfig(e.Config)
	if err != nil {
		b.Fatal(err)
	}
	specs, err := rounds()
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range env.Nodes[agents:] { // idle nodes: watched, never updated
		label(b, c, name, "true")
	}
	// A first controller gives every node stabilize; each agent reports v1 up to date.
	stop, _ := startController(b, e, roundSpec{conc: 1}, "init")
	waitAll(b, c, 5*time.Minute, "every agent up to date at v1", func(n *corev1.Node) bool {
		return n.Labels[keys.Exclude()] == "true" || n.Annotations[keys.State()] == string(uo.StateUpToDate)
	})
	stop()
	b.Logf("agent RSS idle: %s", rss("agent"))
	b.ResetTimer()
	var results []result
	release := 1
	for i, r := range specs {
		for _, ct := range order(i) {
			if len(contenders()) > 1 {
				switchTo(b, c, ct)
			}
			release++
			res := round(b, e, c, r, fmt.Sprintf("v%d", release), ct.name)
			results = append(results, res)
		}
	}
	summarize(b, results)
}

// round publishes release with the host times of r and times its rollout.
func round(b *testing.B, e *testenv.Env, c *kube.Clientset, r roundSpec, release, contender string) result {
	hostTime, downTime, applyTime = r.prepare, r.down, r.apply
	if err := writeScripts(shared, release); err != nil {
		b.Fatal(err)
	}
	n := r.exclude(b, c)
	waitAll(b, c, 2*time.Minute, "every agent sees "+release, func(n *corev1.Node) bool {
		return n.Labels[keys.Exclude()] == "true" || n.Annotations[keys.State()] == string(uo.StateUpdateAvailable)
	})
	start, loadBefore := time.Now(), loadAvg()
	stop, metricsAddr := startController(b, e, r, release)
	maxCordoned := 0
	waitAll(b, c, 60*time.Minute, "every node at "+release, func(n *corev1.Node) bool {
		return n.Labels[keys.Exclude()] == "true" || n.Annotations[keys.Key(uo.KeyCurrentVersion)] == release && n.Annotations[keys.Wanted()] == string(uo.IntentStabilize) &&
			n.Annotations[keys.State()] == string(uo.StateUpToDate) && !n.Spec.Unschedulable
	}, func(list []corev1.Node) {
		cordoned := 0
		for _, n := range list {
			if drain.CordonedBy(n.Annotations) == keys.CordonOwner() {
				cordoned++
			}
		}
		maxCordoned = max(maxCordoned, cordoned)
	})
	wall := time.Since(start)
	load := loadBefore + "–" + loadAvg()
	ctrlRSS := rss("controller")
	turns, err := scrape(metricsAddr, "slipway_update_operator_node_reads_total")
	if err != nil {
		b.Logf("controller metrics: %v", err)
	}
	stop()
	r.include(b, c)
	plain, overlapped := r.ideals(n)
	tag := r.tag()
	b.ReportMetric(wall.Seconds(), "wall-s"+tag)
	b.ReportMetric(wall.Seconds()/plain.Seconds(), "wall/ideal"+tag)
	b.Logf("%s (%s): %d nodes, max-concurrent %d, prepare %s + perform %s + reboot %s, prepare-ahead %v: wall %s; ideal %s (x%.2f), with prepare overlapped %s (x%.2f); at most %d cordoned at once; load average %s",
		tag[1:], contender, n, r.conc, r.prepare, r.apply, r.down, r.ahead, wall.Round(100*time.Millisecond), plain, wall.Seconds()/plain.Seconds(),
		overlapped, wall.Seconds()/overlapped.Seconds(), maxCordoned, load)
	if maxCordoned > r.conc {
		b.Errorf("%d nodes cordoned at once, max-concurrent %d", maxCordoned, r.conc)
	}
	time.Sleep(2 * time.Second) // the audit log is written in batches
	all, err := testenv.ReadAuditAll(auditLog)
	if err != nil {
		b.Fatal(err)
	}
	var events []testenv.AuditEvent
	for _, ev := range all {
		if ev.IsWrite() {
			events = append(events, ev)
		}
	}
	by := map[string]int{}
	for _, ev := range events {
		if !ev.Time.Before(start) && !ev.Time.After(start.Add(wall)) {
			by[writer(ev.UserAgent)]++
		}
	}
	b.Logf("timeline of %s: %s", env.Nodes[0], timeline(events, env.Nodes[0], start, wall))
	summary, slowest, span := spread(events, start, wall)
	b.Logf("where the wall went: %s", summary)
	reqs := apiCalls(all, start, wall)
	ctl, agt := reqs["controller"], reqs["agent"]
	b.ReportMetric(float64(ctl.reads())/float64(n), "controller-reads/node"+tag)
	b.ReportMetric(float64(ctl.total()+agt.total())/float64(n), "round-trips/node"+tag)
	b.ReportMetric((span - r.host()).Seconds(), "overhead-s/node"+tag)
	b.Logf("controller API calls per node (%d nodes in the cluster, %d updated; watches apart): %s; its Node reads by turn: %s",
		len(env.Nodes), n, ctl.perNode(n), turnsSaid(turns))
	b.Logf("agent API calls per node: %s", agt.perNode(n))
	own, sim := ownOverhead(events, start, wall, r.prepare+r.apply)
	trips := float64(ctl.total()+agt.total()) / float64(n)
	b.ReportMetric(own.Seconds(), "own-overhead-s/node"+tag)
	b.Logf("operator overhead per node: one node's update spans %.2f s median for %s of host time: %.2f s; %.1f round trips per node (controller %.1f, agent %.1f)",
		span.Seconds(), r.host(), (span - r.host()).Seconds(), trips,
		float64(ctl.total())/float64(n), float64(agt.total())/float64(n))
	b.Logf("the operator's own time per node (median): %.2f s, once the simulated reboot is taken as the simulator took it (median %.2f s for %s of downtime: the agent stopped, NotReady, the downtime, Ready, a new boot ID)",
		own.Seconds(), sim.Seconds(), r.down)
	if lists := ctl["list nodes"]; lists > 2+n/10 {
		b.Errorf("the controller listed the Nodes %d times for %d nodes: node events are not served from its cache", lists, n)
	}
	b.Logf("timeline of %s (finished last): %s", slowest, timeline(events, slowest, start, wall))
	ours := by["controller"] + by["agent"]
	per := func(k int) float64 { return float64(k) / float64(n) }
	b.ReportMetric(per(ours), "writes/node"+tag)
	b.Logf("API writes per node: controller %.1f, agents %.1f (operator total %.1f); others: %s",
		per(by["controller"]), per(by["agent"]), per(ours), others(by, per))
	b.Logf("controller RSS %s; agents RSS %s", ctrlRSS, rss("agent"))
	return result{contender: contender, tag: tag, wall: wall.Seconds(), overhead: (span - r.host()).Seconds(), own: own.Seconds(), trips: trips, load: load}
}

func writer(ua string) string {
	switch {
	case strings.HasPrefix(ua, "slipway-update-operator-controller"):
		return "controller"
	case strings.HasPrefix(ua, "slipway-update-operator-agent"):
		return "agent"
	case strings.HasPrefix(ua, "kwok"):
		return "kwok"
	case strings.HasPrefix(ua, "slipway-testenv/supervisor"):
		return "supervisor (simulated reboots)"
	}
	if i := strings.IndexAny(ua, "/ "); i > 0 {
		return ua[:i]
	}
	return ua
}

func others(by map[string]int, per func(int) float64) string {
	var parts []string
	for w, n := range by {
		if w != "controller" && w != "agent" {
			parts = append(parts, fmt.Sprintf("%s %.1f", w, per(n)))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// turnsSaid says the controller's slipway_update_operator_node_reads_total.
func turnsSaid(m map[string]float64) string {
	if m == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.0f from the cache, %.0f quorum LISTs, %.0f GETs", m[`{how="cache"}`], m[`{how="list"}`], m[`{how="get"}`])
}

// startController runs the controller as a process, as it runs in a pod,
// with its metrics served at the returned address.
func startController(b testing.TB, e *testenv.Env, r roundSpec, name string) (stop func(), metricsAddr string) {
	metricsAddr = freeAddr()
	args := []string{"update-operator", "controller", "--kubeconfig", e.Kubeconfig, "--namespace", "default", // its fleet state lives there
		"--lease", "", "--metrics-addr", metricsAddr, "--health-addr", "", "--os-image-pattern", "-", "--pause-between", "0s",
		"--max-concurrent", strconv.Itoa(r.conc), "--state-timeout", "5m", "--drain-timeout", "2m"}
	if r.ahead {
		args = append(args, "--prepare-ahead")
	}
	cmd := exec.Command(controllerBin, args...)
	logf, err := os.Create(filepath.Join(e.Dir, fmt.Sprintf("controller-%s.log", name)))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the benchmark
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		logf.Close()
	}, metricsAddr
}

// waitAll polls the fake nodes until ok holds for each; each, when set,
// sees every listing.
func waitAll(b testing.TB, c *kube.Clientset, within time.Duration, what string, ok func(*corev1.Node) bool, each ...func([]corev1.Node)) {
	deadline := time.Now().Add(within)
	for {
		list, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: testenv.NodeRoleLabel + "=true"})
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range each {
			f(list.Items)
		}
		done, behind := 0, []string{}
		for i := range list.Items {
			if n := &list.Items[i]; ok(n) {
				done++
			} else {
				behind = append(behind, n.Name)
			}
		}
		if done == len(list.Items) && done == nodes {
			return
		}
		if time.Now().After(deadline) {
			b.Logf("%s: not yet: %s", what, nodeSteps(list.Items, behind)) // before the logs, which are long
			dumpLogs(b, behind...)
			b.Fatalf("%s: %d of %d after %s", what, done, nodes, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rss summarises the VmRSS of the update-operator processes of role.
func rss(role string) string {
	var kb []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		if len(args) < 3 || filepath.Base(args[0]) != "slipway" || args[1] != "update-operator" || args[2] != role {
			continue
		}
		status, _ := os.ReadFile(filepath.Join(d, "status"))
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				v, _ := strconv.Atoi(f[1])
				kb = append(kb, v)
			}
		}
	}
	if len(kb) == 0 {
		return "n/a"
	}
	sort.Ints(kb)
	mib := func(k int) float64 { return float64(k) / 1024 }
	return fmt.Sprintf("%d processes, median %.1f MiB, max %.1f MiB", len(kb), mib(kb[len(kb)/2]), mib(kb[len(kb)-1]))
}

// dumpLogs logs the tails of the controllers' logs and of the agents' of
// nodes (by default the first node's).
func dumpLogs(b testing.TB, nodes ...string) {
	logs, _ := filepath.Glob(filepath.Join(env.Dir, "controller-*.log"))
	if len(nodes) == 0 && len(env.Nodes) > 0 {
		nodes = env.Nodes[:1]
	}
	for _, n := range nodes {
		logs = append(logs, filepath.Join(env.NodeDir(n), "agent.log"))
	}
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		b.Logf("----- %s -----\n%s", filepath.Base(filepath.Dir(l))+"/"+filepath.Base(l), strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
}

// timeline lists the writes to node's Node during the round: seconds since
// start and writer.
func timeline(events []testenv.AuditEvent, node string, start time.Time, wall time.Duration) string {
	var parts []string
	for _, ev := range events {
		if ev.Name == node && strings.HasPrefix(ev.Resource, "nodes") && !ev.Time.Before(start) && !ev.Time.After(start.Add(wall)) {
			parts = append(parts, fmt.Sprintf("%.1f %s", ev.Time.Sub(start).Seconds(), writer(ev.UserAgent)))
		}
	}
	return strings.Join(parts, ", ")
}

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/hostcheck"
	"slipway.dev/slipway/ops/testenv/monitor"
	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
)

// TestMonitorProcess runs `slipway-sim monitor` against a real API server:
// within the rules it writes nothing; a third unavailable node in a channel
// of concurrency 2 is written as one JSON line with the nodes' history; a
// host under --hosts that booted two releases' folders is written as a
// mixed-boot line; and the process ends failing, with its checks and cost
// on stderr. A run judging that file (checkProcessVerdict) fails on what
// only the process saw.
func TestMonitorProcess(t *testing.T) {
	needCluster(t)
	t.Parallel()
	bin := buildBin(t)
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Options{CRDs: crds.Must(), ToolsDir: os.Getenv(testenv.EnvToolsDir)})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	kc := kubernetes.NewForConfigOrDie(env.Config)
	oc := versioned.NewForConfigOrDie(env.Config)
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ops"}, Spec: v1.UpdateChannelSpec{URL: "file:///mirror", Version: "v1", Concurrency: 2}}
	if _, err := oc.OpsV1().UpdateChannels("ops").Create(ctx, ch, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := func(name string) {
		t.Helper()
		// No Ready condition: NotReady, so unavailable.
		if _, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	node("a")
	node("b")
	out := filepath.Join(t.TempDir(), "violations.jsonl")
	hosts := t.TempDir()
	var stderr syncBuffer
	cmd := exec.Command(filepath.Join(bin, "slipway-sim"), "monitor", "--kubeconfig", env.Kubeconfig, "--out", out, "--for", "5m", "--hosts", hosts)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	waitFor(t, "the monitor watching", func() bool { return strings.Contains(stderr.String(), "watching") })
	time.Sleep(time.Second) // within the rules: nothing written
	if b, _ := os.ReadFile(out); len(b) > 0 {
		t.Fatalf("two unavailable nodes at concurrency 2 reported:\n%s", b)
	}
	node("c")
	var line map[string]any
	waitFor(t, "the violation written", func() bool {
		b, _ := os.ReadFile(out)
		return len(b) > 0 && json.Unmarshal(bytes.SplitN(b, []byte("\n"), 2)[0], &line) == nil
	})
	if line["invariant"] != "channel-concurrency" || !strings.Contains(line["message"].(string), "3 nodes unavailable, concurrency 2") {
		t.Fatalf("violation %v", line)
	}
	if h, _ := line["history"].(map[string]any); h["Node//c"] == nil {
		t.Fatalf("violation without node c's history: %v", line)
	}
	// A host that booted rootfs v2 with kernel v1.
	plantMixedBoot(t, filepath.Join(hosts, "node-1"))
	waitFor(t, "the mixed boot written", func() bool {
		b, _ := os.ReadFile(out)
		lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
		return len(lines) == 2 && json.Unmarshal(lines[1], &line) == nil
	})
	if line["invariant"] != hostcheck.InvMixedBoot || !strings.Contains(line["message"].(string), "node node-1 booted rootfs v2 kernel 5.15.0-v1") {
		t.Fatalf("violation %v", line)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("monitor exit %v, want status 1 (a violation found); stderr:\n%s", err, stderr.String())
	}
	t.Log(stderr.String())
	if !strings.Contains(stderr.String(), "2 violations") {
		t.Fatalf("stderr lacks the summary:\n%s", stderr.String())
	}
	checkProcessVerdict(t, out, start)
}

// checkProcessVerdict judges the process's two violations (the three
// NotReady nodes' channel-concurrency, node-1's mixed boot) as a run does
// when its own monitor saw neither (judgeProcess): with the nodes taken
// down by NotReady faults, the first is excused and the mixed boot alone
// fails the run; with no fault both fail it; one the run's own monitor
// reported already (same key, or same message) is not counted twice.
func checkProcessVerdict(t *testing.T, out string, start time.Time) {
	t.Helper()
	var sched faults.Schedule
	for _, n := range []string{"a", "b", "c"} {
		sched = append(sched, faults.Fault{At: 0, Kind: faults.NotReady, Target: "node/" + n, For: 10 * time.Minute})
	}
	res := Result{Settled: true}
	if err := judgeProcess(&res, out, func(v monitor.Violation) bool { return Excused(v, sched, nil, start) }); err != nil {
		t.Fatal(err)
	}
	if !res.Failed() || len(res.Violations) != 1 || res.Violations[0].Invariant != hostcheck.InvMixedBoot ||
		!strings.HasPrefix(res.Violations[0].Message, processTag+"node node-1 booted rootfs v2") {
		t.Fatalf("the run's verdict with the NotReady faults: failed %t, violations %v, want the mixed boot alone, from the process", res.Failed(), res.Violations)
	}
	if len(res.Excused) != 1 || res.Excused[0].Invariant != monitor.InvChannelConcurrency || len(res.Excused[0].History["Node//c"]) == 0 {
		t.Fatalf("excused %v, want channel-concurrency with its history", res.Excused)
	}
	res = Result{Settled: true}
	if err := judgeProcess(&res, out, func(monitor.Violation) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 2 || len(res.Excused) != 0 {
		t.Fatalf("with no fault: violations %v, excused %v, want both violations", res.Violations, res.Excused)
	}
	own := res.Violations[1]
	own.Message = strings.TrimPrefix(own.Message, processTag)
	res = Result{Settled: true, Violations: []monitor.Violation{own}}
	if err := judgeProcess(&res, out, func(monitor.Violation) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 2 || res.Violations[0].Message != own.Message {
		t.Fatalf("the run's own %s counted again: %v", own.Invariant, res.Violations)
	}
	// Seen by the run's monitor under another key (a cordon's holds the
	// instant each monitor saw it), with the same message.
	own.Key = "seen-elsewhere"
	res = Result{Settled: true, Violations: []monitor.Violation{own}}
	if err := judgeProcess(&res, out, func(monitor.Violation) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 2 {
		t.Fatalf("the run's own %s (another key, the same message) counted again: %v", own.Invariant, res.Violations)
	}
	res = Result{Settled: true}
	if err := judgeProcess(&res, filepath.Join(t.TempDir(), "none.jsonl"), func(monitor.Violation) bool { return false }); err != nil || res.Failed() {
		t.Fatalf("no file (the process found nothing): err %v, failed %t", err, res.Failed())
	}
}

// plantMixedBoot makes dir a k3os host whose boots log holds a boot of
// rootfs v2 with kernel v1 (each folder with its release's marker).
func plantMixedBoot(t *testing.T, dir string) {
	t.Helper()
	l := layout.New(filepath.Join(dir, testenv.K3osSystemDir))
	for c, v := range map[layout.Component][2]string{layout.Rootfs: {"v2", "v2"}, layout.Kernel: {"5.15.0-v1", "v1"}, layout.K3s: {"v1-k3s1", "v1"}} {
		if err := os.MkdirAll(l.VersionDir(c, v[0]), 0o755); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(upgrade.Marker{Release: v[1]})
		if err := os.WriteFile(filepath.Join(l.VersionDir(c, v[0]), upgrade.MarkerFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := l.SetLink(c, layout.CurrentLink, v[0]); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, testenv.BootsLog), []byte("1 rootfs=v2 kernel=5.15.0-v1 k3s=v1-k3s1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a stuck test's budget, not a timing assertion
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMonitorProcessAuditAndApps runs `slipway-sim monitor` with
// --audit-log and --apps: within the rules (two applications each running
// its own jobs, a file under --apps not named --app-report that would
// double a job, ten refused PATCHes of one object in a second) it writes
// nothing; a job in two applications' reports is a swarm-no-double-holder
// line, 60 more refused PATCHes within a second a bounded-write-requests
// line, and the process ends failing.
func TestMonitorProcessAuditAndApps(t *testing.T) {
	needCluster(t)
	t.Parallel()
	bin := buildBin(t)
	env, err := testenv.Start(context.Background(), testenv.Options{CRDs: crds.Must(), ToolsDir: os.Getenv(testenv.EnvToolsDir)})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	dir := t.TempDir()
	apps, audit, out := filepath.Join(dir, "workers"), filepath.Join(dir, "audit.log"), filepath.Join(dir, "violations.jsonl")
	write := func(path, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		tmp := path + ".tmp" // replaced whole, as the applications do
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	patches := func(n int, over time.Duration) {
		t.Helper()
		now := time.Now()
		var b strings.Builder
		for i := range n {
			at := now.Add(-over + time.Duration(i)*over/time.Duration(n)).UTC().Format(time.RFC3339Nano)
			fmt.Fprintf(&b, `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","verb":"patch",`+
				`"objectRef":{"resource":"extendeddaemonsets","namespace":"default","name":"agent","apiGroup":"eds.slipway.dev","apiVersion":"v1alpha1"},`+
				`"responseStatus":{"metadata":{},"code":422},"requestReceivedTimestamp":%q,"stageTimestamp":%q}`+"\n", at, at)
		}
		f, err := os.OpenFile(audit, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(b.String()); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(apps, "swarm-worker-0-aaaa", "app-runs"), "job-a\njob-b\n")
	write(filepath.Join(apps, "swarm-worker-1-bbbb", "app-runs"), "job-c\n")
	write(filepath.Join(apps, "swarm-worker-1-bbbb", "jobs"), "job-a\n") // the worker's jobs file, not the application's
	patches(10, time.Second)
	var stderr syncBuffer
	jobsDue := filepath.Join(dir, "jobs-due.json")
	cmd := exec.Command(filepath.Join(bin, "slipway-sim"), "monitor", "--kubeconfig", env.Kubeconfig, "--out", out, "--for", "5m",
		"--audit-log", audit, "--apps", apps, "--app-report", "app-runs", "--jobs-due", jobsDue)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	waitFor(t, "the monitor watching", func() bool { return strings.Contains(stderr.String(), "watching") })
	time.Sleep(2 * time.Second) // within the rules: nothing written
	if b, _ := os.ReadFile(out); len(b) > 0 {
		t.Fatalf("within the rules, reported:\n%s", b)
	}
	lines := func() []map[string]any {
		b, _ := os.ReadFile(out)
		var ls []map[string]any
		for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var m map[string]any
			if json.Unmarshal(l, &m) == nil {
				ls = append(ls, m)
			}
		}
		return ls
	}
	write(filepath.Join(apps, "swarm-worker-1-bbbb", "app-runs"), "job-c\njob-a\n")
	waitFor(t, "the double holder written", func() bool { return len(lines()) == 1 })
	if l := lines()[0]; l["invariant"] != "swarm-no-double-holder" || !strings.Contains(l["message"].(string), "job-a") {
		t.Fatalf("violation %v", l)
	}
	patches(60, 900*time.Millisecond)
	waitFor(t, "the hot loop written", func() bool { return len(lines()) == 2 })
	if l := lines()[1]; l["invariant"] != "bounded-write-requests" || l["key"] != "ExtendedDaemonSet/default/agent" {
		t.Fatalf("violation %v", l)
	}
	// The runner says the pool settled: every job due now. job-a, job-b and
	// job-c run; job-d runs nowhere (swarm-every-job-running). Jobs that all
	// run are no finding: the first file names only those.
	if err := monitor.WriteJobsDue(jobsDue, monitor.JobsDue{Jobs: []string{"job-a", "job-b", "job-c"}, Due: time.Now()}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // every job runs: nothing more written
	if n := len(lines()); n != 2 {
		t.Fatalf("every job running, yet %d lines:\n%v", n, lines())
	}
	if err := monitor.WriteJobsDue(jobsDue, monitor.JobsDue{Jobs: []string{"job-a", "job-b", "job-c", "job-d"}, Due: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the job running nowhere written", func() bool { return len(lines()) == 3 })
	if l := lines()[2]; l["invariant"] != monitor.InvJobsRunning || l["key"] != "job-d" || !strings.Contains(l["message"].(string), "1 of 4 jobs run nowhere") {
		t.Fatalf("violation %v", l)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("monitor exit %v, want status 1 (violations found); stderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "3 violations, 0 errors") {
		t.Fatalf("stderr lacks the summary:\n%s", stderr.String())
	}
}

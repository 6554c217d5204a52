package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/config"
	"slipway.dev/slipway/ops/testenv"
)

var env *testenv.Env

// TestMain starts a real API server: the worker annotates its pod there.
func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, testenv.Options{}, &env)) }

// mount writes cfg the way the kubelet updates a ConfigMap volume: the file
// is a link through ..data, a symlink swapped to a new directory.
func mount(t *testing.T, dir string, cfg config.Config) {
	t.Helper()
	text, err := cfg.Render()
	if err != nil {
		t.Fatal(err)
	}
	ts := filepath.Join(dir, fmt.Sprintf("..%d", time.Now().UnixNano()))
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, swarmv1.ConfigMapKey), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, swarmv1.ConfigMapKey)
	if _, err := os.Lstat(link); err != nil {
		if err := os.Symlink(filepath.Join("..data", swarmv1.ConfigMapKey), link); err != nil {
			t.Fatal(err)
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func shareOf(jobs []string, version int64) config.Config {
	return config.Config{Version: version, Workloads: map[string]config.Workload{
		"w-0": {Jobs: jobs, Version: version}, "w-1": {Jobs: []string{"other"}, Version: 1},
	}}
}

// TestWorkerFollowsItsShare runs the worker in-process on a mounted-like
// file: it waits for its share, writes its jobs, reports the version on its
// pod, and follows a change (reload) or keeps its first share (restart).
func TestWorkerFollowsItsShare(t *testing.T) {
	e := testenv.Need(t, env)
	kc := kubernetes.NewForConfigOrDie(e.Config)
	ns := fmt.Sprintf("worker-%d", time.Now().UnixNano()%1e9)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller-manager here makes the namespace's default ServiceAccount.
	if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, once := range []bool{false, true} {
		t.Run(fmt.Sprintf("once=%v", once), func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0", Namespace: ns},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "worker:test"}}}}
			_ = kc.CoreV1().Pods(ns).Delete(ctx, "w-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			waitUntil(t, "the old pod gone", func() bool { _, err := kc.CoreV1().Pods(ns).Get(ctx, "w-0", metav1.GetOptions{}); return err != nil })
			if _, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			dir, out := t.TempDir(), filepath.Join(t.TempDir(), "jobs")
			wctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- Run(wctx, Options{ConfigFile: filepath.Join(dir, swarmv1.ConfigMapKey), PodName: "w-0", Namespace: ns,
					Out: out, Once: once, Config: e.Config, Poll: time.Hour})
			}()
			defer func() { stop(); <-done }()
			mount(t, dir, config.Config{Version: 1, Workloads: map[string]config.Workload{"w-1": {Jobs: []string{"x"}, Version: 1}}})
			time.Sleep(200 * time.Millisecond)
			if _, err := os.Stat(out); err == nil {
				t.Fatal("the worker wrote jobs before it had a share")
			}
			mount(t, dir, shareOf([]string{"cam-1", "cam-2"}, 2))
			waitUntil(t, "jobs written and version 2 reported", func() bool { return read(out) == "cam-1\ncam-2\n" && annotation(ctx, kc, ns) == "2" })
			mount(t, dir, shareOf([]string{"cam-3"}, 3))
			if once {
				time.Sleep(300 * time.Millisecond)
				if read(out) != "cam-1\ncam-2\n" || annotation(ctx, kc, ns) != "2" {
					t.Errorf("a restart-mode worker followed a change: %q, version %s", read(out), annotation(ctx, kc, ns))
				}
				// Even so, a share gone from the config is dropped: its jobs run elsewhere.
				mount(t, dir, config.Config{Version: 4, Workloads: map[string]config.Workload{"w-1": {Jobs: []string{"cam-1"}, Version: 4}}})
				waitUntil(t, "the removed share dropped", func() bool { return read(out) == "" })
				return
			}
			waitUntil(t, "the change followed", func() bool { return read(out) == "cam-3\n" && annotation(ctx, kc, ns) == "3" })
			mount(t, dir, config.Config{Version: 4, Workloads: map[string]config.Workload{"w-1": {Jobs: []string{"cam-3"}, Version: 4}}})
			waitUntil(t, "the removed share dropped", func() bool { return read(out) == "" })
		})
	}
}

// read is the jobs a file lists, one per line (its # header skipped; an
// --exec command's output as it is).
func read(path string) string {
	b, _ := os.ReadFile(path)
	var out strings.Builder
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			out.WriteString(l)
		}
	}
	return out.String()
}

func annotation(ctx context.Context, kc kubernetes.Interface, ns string) string {
	p, err := kc.CoreV1().Pods(ns).Get(ctx, "w-0", metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return p.Annotations[swarmv1.AppliedVersionAnnotation]
}

// TestWorkerExec: the command gets the jobs as arguments and is restarted
// with the new ones on a change.
func TestWorkerExec(t *testing.T) {
	dir, out := t.TempDir(), filepath.Join(t.TempDir(), "args")
	mount(t, dir, shareOf([]string{"a", "b"}, 1))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ConfigFile: filepath.Join(dir, swarmv1.ConfigMapKey), PodName: "w-0",
			Exec: []string{"sh", "-c", `echo "$SWARM_VERSION $*" > ` + out + `; exec sleep 60`, "sh"}, Poll: time.Hour})
	}()
	waitUntil(t, "the command started with a b", func() bool { return strings.TrimSpace(read(out)) == "1 a b" })
	mount(t, dir, shareOf([]string{"c"}, 2))
	waitUntil(t, "the command restarted with c", func() bool { return strings.TrimSpace(read(out)) == "2 c" })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("worker: %v", err)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{{ConfigFile: "x", Out: "y"}, {PodName: "p", Out: "y"}, {PodName: "p", ConfigFile: "x"}} {
		if err := Run(context.Background(), o); err == nil {
			t.Errorf("Run(%+v) accepted", o)
		}
	}
}

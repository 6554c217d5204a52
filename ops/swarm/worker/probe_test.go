package worker

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/testenv"
)

// TestWedgedLoopFailsHealthz: the worker serves /readyz red until it has
// read its config and reported the version it applied (and holds its
// Lease), then green; an idle loop keeps /healthz green past its allowance;
// a loop wedged in a read of its config (the volume hangs: here a FIFO no
// one writes) turns /healthz red within the allowance, and green again once
// the read returns.
func TestWedgedLoopFailsHealthz(t *testing.T) {
	e := testenv.Need(t, env)
	kc := kubernetes.NewForConfigOrDie(e.Config)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := fmt.Sprintf("probe-%d", time.Now().UnixNano()%1e9)
	createPodNamespace(ctx, t, kc, ns)

	dir, out := t.TempDir(), filepath.Join(t.TempDir(), "jobs")
	addr := make(chan string, 1)
	const stall = 2 * time.Second
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(wctx, Options{ConfigFile: filepath.Join(dir, swarmv1.ConfigMapKey), PodName: "w-0", Namespace: ns,
			Out: out, Config: e.Config, LeaseDuration: 3 * time.Second, Poll: 300 * time.Millisecond, StallAfter: stall,
			HTTPAddr: "127.0.0.1:0", listening: func(a string) { addr <- a }})
	}()
	fifoDir := t.TempDir()
	fifo := filepath.Join(fifoDir, swarmv1.ConfigMapKey)
	defer func() {
		stop()
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
				releaseFIFO(fifo) // a read still hung there
			}
		}
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		done <- err // for the deferred wait
		t.Fatalf("the worker ended before serving: %v", err)
	}
	if code := get(base + "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d before the config was read, want 503", code)
	}
	mount(t, dir, shareOf([]string{"cam-1"}, 2))
	waitUntil(t, "version 2 reported", func() bool { return annotation(ctx, kc, ns) == "2" })
	waitUntil(t, "/readyz green", func() bool { return get(base+"/readyz") == http.StatusOK })
	time.Sleep(2 * stall) // past the allowance: an idle loop still beats
	if code := get(base + "/healthz"); code != http.StatusOK {
		t.Fatalf("idle worker: /healthz %d, want 200", code)
	}

	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	swapTo(t, dir, fifoDir) // the next read blocks in open(2)
	waitUntil(t, "/healthz red", func() bool { return get(base+"/healthz") == http.StatusServiceUnavailable })
	// The volume recovers, and a writer releases the read that hung (it
	// then sees an empty config; the next read, the recovered one).
	mount(t, dir, shareOf([]string{"cam-1"}, 2))
	waitUntil(t, "the hung read released", func() bool { return releaseFIFO(fifo) })
	waitUntil(t, "/healthz green again", func() bool { return get(base+"/healthz") == http.StatusOK })
}

// releaseFIFO opens the FIFO for writing and closes it: a reader blocked in
// its open(2) returns and reads nothing. False when no reader waits.
func releaseFIFO(path string) bool {
	w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	return w.Close() == nil
}

// createPodNamespace creates ns, its default ServiceAccount and the pod w-0.
func createPodNamespace(ctx context.Context, t *testing.T, kc kubernetes.Interface, ns string) {
	t.Helper()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "worker:test"}}}}
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// swapTo points dir's ..data link at target, as a volume update does.
func swapTo(t *testing.T, dir, target string) {
	t.Helper()
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// get returns the status code of a GET of url (0 when it fails).
func get(url string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

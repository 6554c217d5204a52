package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
)

// TestMonitorProcess runs `slipway-sim monitor` against a real API server:
// within the rules it writes nothing; a third unavailable node in a channel
// of concurrency 2 is written as one JSON line with the nodes' history, and
// the process ends failing, with its checks and cost on stderr.
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
	node("a")
	node("b")
	out := filepath.Join(t.TempDir(), "violations.jsonl")
	var stderr syncBuffer
	cmd := exec.Command(filepath.Join(bin, "slipway-sim"), "monitor", "--kubeconfig", env.Kubeconfig, "--out", out, "--for", "5m")
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
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("monitor exit %v, want status 1 (a violation found); stderr:\n%s", err, stderr.String())
	}
	t.Log(stderr.String())
	if !strings.Contains(stderr.String(), "1 violations") {
		t.Fatalf("stderr lacks the summary:\n%s", stderr.String())
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

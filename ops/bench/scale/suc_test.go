package scale

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/testenv"
)

// SUC runs as ops/e2e/suc runs it: its install manifest's settings, a local
// process with the admin kubeconfig, registering its own Plan CRD.
const (
	sucNamespace    = "system-upgrade"
	planLabelPrefix = "plan.upgrade.cattle.io/"
	cordonCommand   = `kubectl cordon "$NODE_NAME" >/dev/null`
)

var planGVR = schema.GroupVersionResource{Group: "upgrade.cattle.io", Version: "v1", Resource: "plans"}

var sucEnv = []string{
	"SYSTEM_UPGRADE_CONTROLLER_DEBUG=false", "SYSTEM_UPGRADE_CONTROLLER_THREADS=2", "SYSTEM_UPGRADE_CONTROLLER_LEADER_ELECT=true",
	"SYSTEM_UPGRADE_JOB_ACTIVE_DEADLINE_SECONDS=900", "SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT=99", "SYSTEM_UPGRADE_JOB_IMAGE_PULL_POLICY=Always",
	"SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE=rancher/kubectl:v1.30.3", "SYSTEM_UPGRADE_JOB_PRIVILEGED=true",
	"SYSTEM_UPGRADE_JOB_TTL_SECONDS_AFTER_FINISH=900", "SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL=15m",
}

// startSUC starts SUC and returns its pid once its Plan CRD serves.
func startSUC(b *testing.B, e *testenv.Env) int {
	ctx := context.Background()
	kube, dyn := kubernetes.NewForConfigOrDie(e.Config), dynamic.NewForConfigOrDie(e.Config)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sucNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "system-upgrade", Namespace: sucNamespace}}
	if _, err := kube.CoreV1().ServiceAccounts(sucNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	logPath := filepath.Join(e.Dir, "system-upgrade-controller.log")
	log, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(sucBin, "--kubeconfig", e.Kubeconfig, "--name", "system-upgrade-controller", "--namespace", sucNamespace, "--node-name", "control-plane")
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + e.Dir}, sucEnv...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", sucBin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); log.Close() }()
	b.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	waitFor(b, 5*time.Minute, "SUC's Plan CRD to serve", func() (bool, error) {
		select {
		case err := <-exited:
			tail, _ := os.ReadFile(logPath)
			b.Fatalf("system-upgrade-controller exited (%v); its log:\n%s", err, tail)
		default:
		}
		_, err := dyn.Resource(planGVR).Namespace(sucNamespace).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, err
	})
	return cmd.Process.Pid
}

// noopPlan is SUC's no-op plan: cordon (by its Job, as its init container
// would), nothing, and SUC uncordons and labels the node.
func noopPlan() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "upgrade.cattle.io/v1", "kind": "Plan",
		"metadata": map[string]any{"name": "noop", "namespace": sucNamespace,
			"labels": map[string]any{testenv.ExecutorLabelKey: testenv.ExecutorLabelValue}},
		"spec": map[string]any{
			"concurrency": int64(concurrency), "cordon": true, "version": "v2", "serviceAccountName": "system-upgrade",
			"nodeSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": testenv.NodeRoleLabel, "operator": "Exists"}}},
			"upgrade":      map[string]any{"image": "slipway-bench/upgrade", "command": []any{"sh", "-c", cordonCommand}},
		},
	}}
}

// sucDone tells whether every node is labelled at the plan's hash and schedulable.
// The nodes come from the extra watcher's cache: polling a list of every
// Node would add the harness's reads to SUC's.
func sucDone(ctx context.Context, e *testenv.Env, w *nodeWatcher) func() (bool, error) {
	dyn := dynamic.NewForConfigOrDie(e.Config)
	return func() (bool, error) {
		p, err := dyn.Resource(planGVR).Namespace(sucNamespace).Get(ctx, "noop", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		hash, _, _ := unstructured.NestedString(p.Object, "status", "latestHash")
		if hash == "" {
			return false, fmt.Errorf("the plan has no latestHash yet")
		}
		done := 0
		for _, n := range w.nodes() {
			if _, worker := n.Labels[testenv.NodeRoleLabel]; worker && n.Labels[planLabelPrefix+"noop"] == hash && !n.Spec.Unschedulable {
				done++
			}
		}
		return done == nodes, fmt.Errorf("%d of %d nodes done", done, nodes)
	}
}

// waitFor polls cond every 2 s until it holds or timeout passes.
func waitFor(b *testing.B, timeout time.Duration, what string, cond func() (bool, error)) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, err)
		}
		time.Sleep(2 * time.Second)
	}
}

func dynClient(e *testenv.Env) dynamic.Interface { return dynamic.NewForConfigOrDie(e.Config) }

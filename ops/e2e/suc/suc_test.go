package suc

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

const (
	sucNamespace = "system-upgrade"
	sucName      = "system-upgrade-controller"
	// planLabelPrefix + a plan's name is the label SUC puts on a node, set
	// to the plan's hash, once the plan's Job completed there.
	planLabelPrefix = "plan.upgrade.cattle.io/"
)

var planGVR = schema.GroupVersionResource{Group: "upgrade.cattle.io", Version: "v1", Resource: "plans"}

// sucEnv is what its install manifest's ConfigMap gives the controller
// (manifests/system-upgrade-controller.yaml): its defaults, leader election
// included.
var sucEnv = []string{
	"SYSTEM_UPGRADE_CONTROLLER_DEBUG=false",
	"SYSTEM_UPGRADE_CONTROLLER_THREADS=2",
	"SYSTEM_UPGRADE_CONTROLLER_LEADER_ELECT=true",
	"SYSTEM_UPGRADE_JOB_ACTIVE_DEADLINE_SECONDS=900",
	"SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT=99",
	"SYSTEM_UPGRADE_JOB_IMAGE_PULL_POLICY=Always",
	"SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE=rancher/kubectl:v1.30.3",
	"SYSTEM_UPGRADE_JOB_PRIVILEGED=true",
	"SYSTEM_UPGRADE_JOB_TTL_SECONDS_AFTER_FINISH=900",
	"SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL=15m",
}

// clients reach the simulated cluster as its admin.
type clients struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

// startSUC creates SUC's namespace and service account (its Jobs' pods run
// as it), starts the controller as a local process, and waits until its
// Plan CRD serves. It returns the controller's pid; the process is stopped
// when b ends.
func startSUC(b *testing.B) (clients, int) {
	b.Helper()
	e := testenv.Need(b, env)
	c := clients{kubernetes.NewForConfigOrDie(e.Config), dynamic.NewForConfigOrDie(e.Config)}
	ctx := context.Background()
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sucNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "system-upgrade", Namespace: sucNamespace}}
	if _, err := c.kube.CoreV1().ServiceAccounts(sucNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	logPath := filepath.Join(e.Dir, "system-upgrade-controller.log")
	log, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(sucBin, "--kubeconfig", e.Kubeconfig, "--name", sucName, "--namespace", sucNamespace, "--node-name", "control-plane")
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
	waitFor(b, 3*time.Minute, "SUC's Plan CRD to serve", func() (bool, error) {
		select {
		case err := <-exited:
			tail, _ := os.ReadFile(logPath)
			b.Fatalf("system-upgrade-controller exited (%v); its log:\n%s", err, tail)
		default:
		}
		_, err := c.dyn.Resource(planGVR).Namespace(sucNamespace).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, err
	})
	return c, cmd.Process.Pid
}

// plan is one SUC Plan of the benchmark.
type plan struct {
	name        string
	concurrency int
	cordon      bool
	command     []string
	// after, when set, limits the plan to nodes where that plan completed.
	after string
}

// object is the Plan as SUC reads it: version v2, every fake node, the
// executor's label (copied onto its Jobs and pods), the service account.
func (p plan) object() *unstructured.Unstructured {
	exprs := []any{map[string]any{"key": testenv.NodeRoleLabel, "operator": "Exists"}}
	if p.after != "" {
		exprs = append(exprs, map[string]any{"key": planLabelPrefix + p.after, "operator": "Exists"})
	}
	command := make([]any, len(p.command))
	for i, c := range p.command {
		command[i] = c
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "upgrade.cattle.io/v1", "kind": "Plan",
		"metadata": map[string]any{"name": p.name, "namespace": sucNamespace,
			"labels": map[string]any{testenv.ExecutorLabelKey: testenv.ExecutorLabelValue}},
		"spec": map[string]any{
			"concurrency":        int64(p.concurrency),
			"cordon":             p.cordon,
			"version":            "v2",
			"serviceAccountName": "system-upgrade",
			"nodeSelector":       map[string]any{"matchExpressions": exprs},
			"upgrade":            map[string]any{"image": "slipway-bench/upgrade", "command": command},
		},
	}}
}

// waitFor polls cond every half second until it holds or timeout passes.
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
		time.Sleep(500 * time.Millisecond)
	}
}

// planDone reports whether every fake node carries the plan's label at its
// current hash and is schedulable again (SUC sets both in one update).
func planDone(ctx context.Context, c clients, name string) (bool, error) {
	p, err := c.dyn.Resource(planGVR).Namespace(sucNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	hash, _, _ := unstructured.NestedString(p.Object, "status", "latestHash")
	if hash == "" {
		return false, fmt.Errorf("plan %s has no latestHash yet", name)
	}
	list, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.NodeRoleLabel})
	if err != nil {
		return false, err
	}
	done := 0
	for _, n := range list.Items {
		if n.Labels[planLabelPrefix+name] == hash && !n.Spec.Unschedulable {
			done++
		}
	}
	return done == nodes, fmt.Errorf("%d of %d nodes done", done, nodes)
}

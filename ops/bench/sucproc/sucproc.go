// Package sucproc runs rancher's system-upgrade-controller (SUC) on a
// simulated cluster (ops/testenv) the way the benchmarks that put it beside
// slipway run it: a local process of a binary built from SUC's public
// source (scripts/bench-suc builds it), with its install manifest's
// settings and the cluster's admin kubeconfig, registering its own Plan
// CRD; and the Plan that makes its Jobs run on the node executor. Nothing
// of SUC's code is here.
package sucproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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
	// Namespace is where SUC runs and reads its Plans.
	Namespace = "system-upgrade"
	// Name is SUC's name: its --name, and the name its binary must run
	// under, since client-go takes the user agent (and the field manager)
	// from it and the benchmarks tell SUC's requests by that.
	Name = "system-upgrade-controller"
	// ServiceAccount is the one its Jobs' pods run as.
	ServiceAccount = "system-upgrade"
	// PlanLabelPrefix + a plan's name is the label SUC puts on a node, set
	// to the plan's hash, once the plan's Job completed there.
	PlanLabelPrefix = "plan.upgrade.cattle.io/"
)

// PlanGVR is SUC's Plan resource.
var PlanGVR = schema.GroupVersionResource{Group: "upgrade.cattle.io", Version: "v1", Resource: "plans"}

// Env is what SUC's install manifest's ConfigMap gives the controller
// (manifests/system-upgrade-controller.yaml): its defaults, leader election
// included.
var Env = []string{
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

// Options say which binary to run on which cluster.
type Options struct {
	Bin        string // SUC's binary
	Kubeconfig string // the cluster's admin kubeconfig
	Dir        string // its log goes to Dir/system-upgrade-controller.log
	Kube       kubernetes.Interface
	Dyn        dynamic.Interface
	Timeout    time.Duration // for its Plan CRD to serve; 5 minutes when 0
}

// Controller is a running SUC.
type Controller struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	err     error // cmd.Wait's, once exited is closed
	logPath string
}

// Start creates SUC's namespace and its Jobs' ServiceAccount, starts the
// controller and waits until its Plan CRD serves. A controller that exits
// first is an error carrying the end of its log.
func Start(ctx context.Context, o Options) (*Controller, error) {
	if st, err := os.Stat(o.Bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("SUC's binary %q is not an executable file (scripts/bench-suc builds one)", o.Bin)
	}
	if filepath.Base(o.Bin) != Name {
		return nil, fmt.Errorf("SUC's binary %q must be named %s: its requests are told by that name (scripts/bench-suc links it so)", o.Bin, Name)
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if _, err := o.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create SUC's namespace: %w", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ServiceAccount, Namespace: Namespace}}
	if _, err := o.Kube.CoreV1().ServiceAccounts(Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create SUC's ServiceAccount: %w", err)
	}
	c := &Controller{exited: make(chan struct{}), logPath: filepath.Join(o.Dir, Name+".log")}
	log, err := os.Create(c.logPath)
	if err != nil {
		return nil, err
	}
	c.cmd = exec.Command(o.Bin, "--kubeconfig", o.Kubeconfig, "--name", Name, "--namespace", Namespace, "--node-name", "control-plane")
	c.cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + o.Dir}, Env...)
	c.cmd.Stdout, c.cmd.Stderr = log, log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL} // never outlives a test binary that dies
	if err := c.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", o.Bin, err)
	}
	go func() { c.err = c.cmd.Wait(); log.Close(); close(c.exited) }()
	deadline := time.Now().Add(o.Timeout)
	for {
		select {
		case <-c.exited:
			return nil, fmt.Errorf("%s exited before its Plan CRD served (%v); the end of its log:\n%s", Name, c.err, c.logTail(40))
		default:
		}
		_, err := o.Dyn.Resource(PlanGVR).Namespace(Namespace).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.Stop()
			return nil, fmt.Errorf("%s's Plan CRD did not serve within %s (last: %v)", Name, o.Timeout, err)
		}
		time.Sleep(time.Second)
	}
}

// Pid is the controller's process id.
func (c *Controller) Pid() int { return c.cmd.Process.Pid }

// Stop ends the controller (SIGTERM, SIGKILL after 10 s) and waits for it.
func (c *Controller) Stop() {
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.exited
	}
}

// logTail is the last n lines of the controller's log.
func (c *Controller) logTail(n int) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Plan is one SUC Plan of a benchmark: version v2 on every fake node, its
// Jobs and pods labelled for the node executor.
type Plan struct {
	Name        string
	Concurrency int
	Cordon      bool
	Command     []string
	// After, when set, limits the plan to nodes where that plan completed.
	After string
	// NodeLabel, when set, limits the plan to the nodes with that label.
	NodeLabel string
}

// Object is the Plan as SUC reads it.
func (p Plan) Object() *unstructured.Unstructured {
	exprs := []any{map[string]any{"key": testenv.NodeRoleLabel, "operator": "Exists"}}
	if p.After != "" {
		exprs = append(exprs, map[string]any{"key": PlanLabelPrefix + p.After, "operator": "Exists"})
	}
	if p.NodeLabel != "" {
		exprs = append(exprs, map[string]any{"key": p.NodeLabel, "operator": "Exists"})
	}
	command := make([]any, len(p.Command))
	for i, c := range p.Command {
		command[i] = c
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "upgrade.cattle.io/v1", "kind": "Plan",
		"metadata": map[string]any{"name": p.Name, "namespace": Namespace,
			"labels": map[string]any{testenv.ExecutorLabelKey: testenv.ExecutorLabelValue}},
		"spec": map[string]any{
			"concurrency":        int64(p.Concurrency),
			"cordon":             p.Cordon,
			"version":            "v2",
			"serviceAccountName": ServiceAccount,
			"nodeSelector":       map[string]any{"matchExpressions": exprs},
			"upgrade":            map[string]any{"image": "slipway-bench/upgrade", "command": command},
		},
	}}
}

package testenv

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"slipway.dev/slipway/ops/testenv/supervisor"
)

//go:embed stages.yaml
var stagesYAML []byte

// startCluster starts kube-controller-manager, kube-scheduler and kwok, creates
// the fake nodes and waits until they are Ready and pods can be created.
func (e *Env) startCluster(ctx context.Context, tools string) error {
	kc := "--kubeconfig=" + e.Kubeconfig
	lease, grace := nodeLease(e.opts.NodeLeaseSeconds)
	kcmArgs := []string{kc,
		"--authentication-kubeconfig=" + e.Kubeconfig, "--authorization-kubeconfig=" + e.Kubeconfig,
		"--service-account-private-key-file=" + filepath.Join(e.Dir, "sa.key"),
		"--root-ca-file=" + filepath.Join(e.Dir, "apiserver-certs", "apiserver.crt"),
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
		"--controllers=*,-nodeipam", "--v=1"}
	if grace > 0 {
		kcmArgs = append(kcmArgs, fmt.Sprintf("--node-monitor-grace-period=%ds", grace))
	}
	if q := e.opts.ControllerManagerQPS; q > 0 {
		kcmArgs = append(kcmArgs, fmt.Sprintf("--kube-api-qps=%d", q), fmt.Sprintf("--kube-api-burst=%d", 2*q))
	}
	kcm, err := e.addProcess("kube-controller-manager", filepath.Join(tools, binControllerManager), kcmArgs...)
	if err != nil {
		return err
	}
	sched, err := e.addProcess("kube-scheduler", filepath.Join(tools, binScheduler), kc,
		"--authentication-kubeconfig="+e.Kubeconfig, "--authorization-kubeconfig="+e.Kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0", "--v=1")
	if err != nil {
		return err
	}
	stages := filepath.Join(e.Dir, "kwok-stages.yaml")
	if err := os.WriteFile(stages, stagesYAML, 0o644); err != nil {
		return fmt.Errorf("write kwok stages: %w", err)
	}
	// kwok renews each fake node's Lease (kube-node-lease) like a kubelet,
	// every quarter of its duration: without Leases, the node lifecycle
	// controller turns every node Ready=Unknown after its grace period, then
	// marks its pods NotReady, and every PodDisruptionBudget reports 0 healthy.
	// The heartbeat package's status reports, 5 minutes apart, rely on it:
	// a kubelet with a Lease reports an unchanged status that rarely.
	kwok, err := e.addProcess("kwok", filepath.Join(tools, binKwok), kc, "--config="+stages,
		"--manage-nodes-with-annotation-selector="+FakeNodeAnnotation+"="+FakeNodeAnnotationValue,
		"--node-lease-duration-seconds="+strconv.Itoa(lease))
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	for i := 1; i <= e.opts.Nodes; i++ {
		e.Nodes = append(e.Nodes, e.opts.NodePrefix+strconv.Itoa(i))
	}
	if err := createNodes(ctx, cs, e.Nodes); err != nil {
		return err
	}
	watched := []*process{e.procs[0], e.procs[1], kcm, sched, kwok}
	nodes := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "nodes", "", fields.Everything())
	if err := e.watchUntil(ctx, watched, "fake nodes Ready", nodes, &corev1.Node{}, allNodesReady(e.Nodes)); err != nil {
		return err
	}
	// Pods need the default ServiceAccount, which the controller-manager creates.
	sas := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "serviceaccounts", "default", fields.Everything())
	return e.watchUntil(ctx, watched, "default ServiceAccount", sas, &corev1.ServiceAccount{}, func(ev watch.Event) (bool, error) {
		sa, ok := ev.Object.(*corev1.ServiceAccount)
		return ok && sa.Name == "default" && ev.Type != watch.Deleted, nil
	})
}

// nodeLease is the fake nodes' Lease duration for Options.NodeLeaseSeconds
// and, when it is longer than a kubelet's, the node monitor grace period
// (seconds) that misses as many renewals as the default does at 40 s: 50 s
// is five renewals of 10 s; otherwise grace is 0 (the default).
func nodeLease(seconds int) (lease, grace int) {
	if seconds <= 40 {
		return 40, 0
	}
	return seconds, seconds * 5 / 4
}

// FakeNode is the Node object of a fake node named name, on a boot of its
// own: a kubelet reports its boot ID from its first status, so the node's
// first reboot (a new boot ID, supervisor.Reboot) is one the invariant
// monitor can see. A node registered again on the same boot keeps its
// old boot ID (copy it over this one).
func FakeNode(name string) *corev1.Node {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{FakeNodeAnnotation: FakeNodeAnnotationValue, "node.alpha.kubernetes.io/ttl": "0"},
			Labels: map[string]string{
				"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"type": "kwok", NodeRoleLabel: "true",
			},
		},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res, NodeInfo: corev1.NodeSystemInfo{BootID: supervisor.NewBootID()}},
	}
}

func createNodes(ctx context.Context, cs kubernetes.Interface, names []string) error {
	for _, n := range names {
		_, err := cs.CoreV1().Nodes().Create(ctx, FakeNode(n), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create fake node %s: %w", n, err)
		}
	}
	return nil
}

// allNodesReady is a watch condition true once every named node is Ready.
func allNodesReady(names []string) watchtools.ConditionFunc {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = false
	}
	ready := 0
	return func(ev watch.Event) (bool, error) {
		n, ok := ev.Object.(*corev1.Node)
		if !ok {
			return false, nil
		}
		was, known := want[n.Name]
		if !known {
			return false, nil
		}
		now := ev.Type != watch.Deleted && NodeReady(n)
		if now != was {
			want[n.Name] = now
			if now {
				ready++
			} else {
				ready--
			}
		}
		return ready == len(want), nil
	}
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// watchUntil watches lw's objects (of obj's type) until cond holds, failing
// early when one of procs exits.
func (e *Env) watchUntil(ctx context.Context, procs []*process, what string, lw cache.ListerWatcher, obj runtime.Object, cond watchtools.ConditionFunc) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	died := make(chan error, 1)
	go func() {
		err := waitFor(ctx, what, 500*time.Millisecond, procs, func(context.Context) (bool, error) { return false, nil })
		if ctx.Err() == nil {
			died <- err
			cancel()
		}
	}()
	_, err := watchtools.UntilWithSync(ctx, lw, obj, nil, cond)
	select {
	case derr := <-died:
		return derr
	default:
	}
	if err != nil {
		e.DumpLogs(e.opts.Log, 20)
		return fmt.Errorf("wait for %s: %w", what, err)
	}
	return nil
}

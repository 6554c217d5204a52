package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/generated/swarm/clientset/versioned"
	"slipway.dev/slipway/ops/swarm/config"
	"slipway.dev/slipway/ops/swarm/manifest"
	"slipway.dev/slipway/ops/testenv"
)

// pool is a namespace with an in-process controller and the test's stand-in
// for the worker sidecars: kwok runs the pods without running anything in
// them, so the test reads each Ready pod's share annotation and annotates
// the pod with the version of its share, as `slipway swarm worker` does. In
// restart mode a pod applies its share once, when it starts (a change comes
// by restart); in reload mode it applies every change.
type pool struct {
	t        testing.TB
	ns       string
	kube     kubernetes.Interface
	swarm    versioned.Interface
	ctrl     *Controller
	stopCtrl func()
	reload   bool
	// stall is the controllers' StallAfter (0: the default).
	stall time.Duration
	// maxRestarting is the most workers the status showed Restarting at once.
	maxRestarting int

	mu      sync.Mutex
	applied map[types.UID]int64 // pod UID -> version annotated
}

// poolSeq numbers the pools' namespaces apart: the tests run in parallel.
var poolSeq atomic.Int64

func newPool(t testing.TB, reload bool) *pool {
	t.Helper()
	return newPoolWith(t, reload, true)
}

// newPoolWith is newPool; fake false leaves the workers to the test (real
// worker processes, see fleet).
func newPoolWith(t testing.TB, reload, fake bool) *pool {
	t.Helper()
	e := testenv.Need(t, env)
	p := &pool{t: t, reload: reload, applied: map[types.UID]int64{}}
	p.kube = kubernetes.NewForConfigOrDie(e.Config)
	p.swarm = versioned.NewForConfigOrDie(e.Config)
	p.ns = fmt.Sprintf("swarm-%d-%d", time.Now().UnixNano()%1e9, poolSeq.Add(1))
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := p.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller runs with the manifest's RBAC, as its ServiceAccount;
	// the stand-in workers patch pods as theirs.
	p.applyRBAC(ctx)
	p.ctrl, p.stopCtrl = p.startController("test")
	var wg sync.WaitGroup
	if fake {
		wg.Add(1)
		go func() { defer wg.Done(); p.playWorkers(ctx) }()
	}
	t.Cleanup(func() { p.stopCtrl(); cancel(); wg.Wait() })
	return p
}

// startController runs a controller replica named identity, as the
// manifest's ServiceAccount, until the returned stop is called.
func (p *pool) startController(identity string) (*Controller, func()) {
	p.t.Helper()
	return p.startControllerSettling(identity, 30*time.Second)
}

// startControllerSettling is startController with the settle timeout given.
func (p *pool) startControllerSettling(identity string, settle time.Duration) (*Controller, func()) {
	p.t.Helper()
	var log io.Writer = io.Discard
	if testing.Verbose() {
		log = os.Stderr
	}
	c, err := New(Options{Config: p.as(env.Config, manifest.ControllerName), Namespace: p.ns, Identity: identity, HTTPAddr: "127.0.0.1:0",
		Log: slog.New(slog.NewTextHandler(log, nil)).With("identity", identity), SettleTimeout: settle, LeaseDuration: 6 * time.Second, StallAfter: p.stall})
	if err != nil {
		p.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	return c, sync.OnceFunc(func() { cancel(); <-done })
}

// playWorkers annotates Ready pods with the version of their share until ctx ends.
func (p *pool) playWorkers(ctx context.Context) {
	for ctx.Err() == nil {
		p.applyOnce(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (p *pool) applyOnce(ctx context.Context) {
	if sw, err := p.swarm.SwarmV1alpha1().Swarms(p.ns).Get(ctx, "work", metav1.GetOptions{}); err == nil {
		n := 0
		for _, w := range sw.Status.Workers {
			if w.Phase == swarmv1.PhaseRestarting {
				n++
			}
		}
		p.mu.Lock()
		p.maxRestarting = max(p.maxRestarting, n)
		p.mu.Unlock()
	}
	pods, err := p.kube.CoreV1().Pods(p.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, pod := range pods.Items {
		// The worker reads its pod's share annotation (a downwardAPI volume).
		cfg, err := config.Parse(pod.Annotations[config.ShareAnnotation])
		if err != nil {
			continue
		}
		share, ok := cfg.Workloads[pod.Name]
		if !ok || pod.DeletionTimestamp != nil || !podReady(&pod) {
			continue
		}
		p.mu.Lock()
		v, done := p.applied[pod.UID]
		p.mu.Unlock()
		if (done && !p.reload) || v == share.Version {
			continue
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, swarmv1.AppliedVersionAnnotation, strconv.FormatInt(share.Version, 10))
		if _, err := p.workerFor(pod.Name).CoreV1().Pods(p.ns).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
			p.mu.Lock()
			p.applied[pod.UID] = share.Version
			p.mu.Unlock()
		}
	}
}

// workerFor is the client of the worker of pod: its ServiceAccount with the
// pod-name claim of its bound token, as the admission policy expects.
func (p *pool) workerFor(pod string) kubernetes.Interface {
	c := rest.CopyConfig(env.Config)
	c.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + p.ns + ":" + manifest.WorkerName,
		Extra: map[string][]string{manifest.PodNameExtra: {pod}}}
	return kubernetes.NewForConfigOrDie(c)
}

// applyRBAC creates the manifest's ServiceAccounts, Roles and RoleBindings
// in the pool's namespace.
func (p *pool) applyRBAC(ctx context.Context) {
	p.t.Helper()
	for _, obj := range manifest.RBAC(p.ns) {
		var err error
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = p.kube.CoreV1().ServiceAccounts(p.ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = p.kube.RbacV1().Roles(p.ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = p.kube.RbacV1().RoleBindings(p.ns).Create(ctx, o, metav1.CreateOptions{})
		default:
			err = fmt.Errorf("unexpected RBAC object %T", obj)
		}
		if err != nil {
			p.t.Fatal(err)
		}
	}
}

// as is cfg impersonating the ServiceAccount sa of the pool's namespace.
func (p *pool) as(cfg *rest.Config, sa string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + p.ns + ":" + sa}
	return c
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// statefulSet creates the workers' StatefulSet, labelled for the Swarm.
func (p *pool) statefulSet(replicas int32) {
	p.t.Helper()
	p.statefulSetOf(replicas, podTemplate(map[string]string{"app": "worker"}))
}

func (p *pool) statefulSetOf(replicas int32, tmpl corev1.PodTemplateSpec) {
	p.t.Helper()
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "swarm-worker", Namespace: p.ns, Labels: map[string]string{"swarm": "work"}},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels},
			Template: tmpl,
		},
	}
	if _, err := p.kube.AppsV1().StatefulSets(p.ns).Create(context.Background(), sts, metav1.CreateOptions{}); err != nil {
		p.t.Fatal(err)
	}
}

func podTemplate(labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "worker", Image: "worker:test"}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

func (p *pool) scale(replicas int32) {
	p.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := p.kube.AppsV1().StatefulSets(p.ns).Patch(context.Background(), "swarm-worker", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		p.t.Fatal(err)
	}
}

// createSwarm creates the Swarm "work" over the workloads labelled swarm=work.
func (p *pool) createSwarm(spec swarmv1.SwarmSpec) {
	p.t.Helper()
	spec.Workers = metav1.LabelSelector{MatchLabels: map[string]string{"swarm": "work"}}
	sw := &swarmv1.Swarm{ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: p.ns}, Spec: spec}
	if _, err := p.swarm.SwarmV1alpha1().Swarms(p.ns).Create(context.Background(), sw, metav1.CreateOptions{}); err != nil {
		p.t.Fatal(err)
	}
}

func (p *pool) editSwarm(edit func(*swarmv1.SwarmSpec)) {
	p.t.Helper()
	for range 5 {
		sw, err := p.swarm.SwarmV1alpha1().Swarms(p.ns).Get(context.Background(), "work", metav1.GetOptions{})
		if err != nil {
			p.t.Fatal(err)
		}
		edit(&sw.Spec)
		_, err = p.swarm.SwarmV1alpha1().Swarms(p.ns).Update(context.Background(), sw, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			if err != nil {
				p.t.Fatal(err)
			}
			return
		}
	}
	p.t.Fatal("the Swarm kept changing under the test")
}

// waitFor polls until cond holds for the Swarm, or fails after 90 s.
func (p *pool) waitFor(what string, cond func(*swarmv1.Swarm) bool) *swarmv1.Swarm {
	p.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var sw *swarmv1.Swarm
	for time.Now().Before(deadline) {
		var err error
		sw, err = p.swarm.SwarmV1alpha1().Swarms(p.ns).Get(context.Background(), "work", metav1.GetOptions{})
		if err == nil && cond(sw) {
			return sw
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.t.Fatalf("timed out waiting for %s; status: %+v", what, sw.Status)
	return nil
}

// converged waits until the Swarm has workers Ready workers and says Converged.
func (p *pool) converged(workers int) *swarmv1.Swarm {
	p.t.Helper()
	return p.waitFor(fmt.Sprintf("%d workers converged", workers), func(sw *swarmv1.Swarm) bool {
		return sw.Status.ObservedGeneration == sw.Generation && int(sw.Status.WorkerCount) == workers &&
			meta.IsStatusConditionTrue(sw.Status.Conditions, swarmv1.ConditionConverged) &&
			!meta.IsStatusConditionTrue(sw.Status.Conditions, swarmv1.ConditionInvalid) &&
			p.readyPods() == workers
	})
}

func (p *pool) readyPods() int {
	pods, err := p.kube.CoreV1().Pods(p.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return -1
	}
	n := 0
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil && podReady(&pod) {
			n++
		}
	}
	return n
}

// config reads the assignment the controller recorded in the workers'
// ConfigMap.
func (p *pool) config() (config.Config, string) {
	p.t.Helper()
	cm, err := p.kube.CoreV1().ConfigMaps(p.ns).Get(context.Background(), "work"+swarmv1.ConfigMapSuffix, metav1.GetOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
	rec := readRecord(cm)
	if rec.parseErr != nil {
		p.t.Fatal(rec.parseErr)
	}
	return rec.cfg, cm.ResourceVersion
}

// podUIDs maps the pods' names to their UIDs.
func (p *pool) podUIDs() map[string]types.UID {
	p.t.Helper()
	pods, err := p.kube.CoreV1().Pods(p.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil {
			out[pod.Name] = pod.UID
		}
	}
	return out
}

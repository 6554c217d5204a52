package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	swarmversioned "slipway.dev/slipway/ops/generated/swarm/clientset/versioned"
	"slipway.dev/slipway/ops/swarm/appcheck"
	"slipway.dev/slipway/ops/swarm/config"
	"slipway.dev/slipway/ops/swarm/configmount"
	"slipway.dev/slipway/ops/swarm/manifest"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/monitor"
)

// The swarm system: two `slipway swarm controller` replicas (the token of
// the manifest's ServiceAccount, each behind its own proxy) assign twelve
// jobs over a StatefulSet of three worker pods, which kwok runs. The run
// plays the kubelet of each worker pod: it mounts the pod's share
// annotation (a downwardAPI volume, after a lag of its own), starts a real
// `slipway swarm worker` with a token bound to the pod (through the
// pod's proxy), beside an application stand-in (appcheck.StandIn: it
// follows the worker's jobs file and acknowledges it, stops its jobs once
// the file's validity lapses, and takes 1 s to stop a job), and stops
// both before it lets a deleted pod's object go. What the applications
// report they run is what the monitor judges (swarm-no-double-holder,
// swarm-every-job-running). It has settled when the Swarm converged over
// every worker and the applications run every job exactly once.

const (
	swarmNS      = "swarm"
	swarmWorkers = 3
	swarmLease   = 6 * time.Second
	// swarmLongLease is the workers' Lease under the "long-lease" variant:
	// an incarnation cut off from the API server keeps its jobs until the
	// validity of its last jobs file (within its Lease) lapses, longer
	// than its replacement takes to start.
	swarmLongLease  = 20 * time.Second
	swarmAppStop    = time.Second
	swarmFinalizer  = "chaos.slipway.dev/worker-running"
	swarmJobsWithin = time.Minute // every job runs again within this of the faults' end
)

var swarmJobs = func() []string {
	var out []string
	for i := range 12 {
		out = append(out, fmt.Sprintf("job-%02d", i))
	}
	return out
}()

// swarmPodNames are the StatefulSet's pods.
func swarmPodNames() []string {
	var out []string
	for i := range swarmWorkers {
		out = append(out, fmt.Sprintf("swarm-worker-%d", i))
	}
	return out
}

type swarmSystem struct {
	h       *harness
	kc      kubernetes.Interface
	sc      swarmversioned.Interface
	variant string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	pods   map[types.UID]*workerPod
	shares map[types.UID]string
}

// workerPod is one worker pod incarnation's processes: its worker, its
// application stand-in, its mount.
type workerPod struct {
	name                     string
	uid                      types.UID
	dir, mount, out, ack     string
	report, kubeconfig, logf string
	args                     []string

	cmd      *exec.Cmd
	exited   chan struct{}
	app      context.CancelFunc
	appDone  chan struct{}
	stopping atomic.Bool
	// orphan: the pod was force-deleted; its processes go on, as on a
	// node the API server cannot reach.
	orphan atomic.Bool
}

func runSwarm(ctx context.Context, o Options) (Result, error) {
	if o.Settle <= 0 {
		o.Settle = 2 * time.Minute
	}
	for _, v := range strings.Split(o.Variant, ",") {
		if v != "" && !slices.Contains(swarmVariants, v) {
			return Result{}, fmt.Errorf("swarm: unknown variant %q (known, joined with commas: %s)", v, strings.Join(swarmVariants, ", "))
		}
	}
	return runSystem(ctx, o, &swarmSystem{variant: o.Variant, pods: map[types.UID]*workerPod{}, shares: map[types.UID]string{}})
}

// swarmSpec: controllers and workers (kill, pause, network), a worker pod
// force-deleted (kill of pod/<name>), nodes NotReady.
func swarmSpec(o Options, nodes []string) faults.Spec {
	procs := slices.Clone(controllers)
	var podTargets, nodeTargets []string
	for _, p := range swarmPodNames() {
		procs = append(procs, "worker/"+p)
		podTargets = append(podTargets, "pod/"+p)
	}
	for _, n := range nodes {
		nodeTargets = append(nodeTargets, "node/"+n)
	}
	return faults.Spec{Duration: o.Duration, Gap: 1500 * time.Millisecond, MaxFor: 8 * time.Second, Targets: map[faults.Kind][]string{
		faults.Kill: append(procs, podTargets...), faults.Pause: procs,
		faults.Latency: procs, faults.HalfOpen: procs, faults.Partition: procs, faults.Drop: procs,
		faults.NotReady: nodeTargets,
	}, Weights: map[faults.Kind]int{
		faults.Kill: 4, faults.Pause: 3, faults.Latency: 2, faults.HalfOpen: 2, faults.Partition: 2, faults.Drop: 2, faults.NotReady: 1,
	}}
}

func (*swarmSystem) spec(o Options, nodes []string) faults.Spec { return swarmSpec(o, nodes) }

func (*swarmSystem) limits() monitor.Limits { return monitor.Limits{} }

func (*swarmSystem) nodeCommand(*harness) ([]string, []string, error) { return nil, nil, nil }

func (s *swarmSystem) setup(ctx context.Context, h *harness, kc kubernetes.Interface) error {
	s.h = h
	objs := []any{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: swarmNS}}}
	objs = append(objs, manifest.RBAC(swarmNS)...)
	objs = append(objs, manifest.WorkerAdmission(swarmNS)...)
	objs = append(objs, manifest.ControllerAdmission(swarmNS)...)
	if err := applyAccess(ctx, kc, objs); err != nil {
		return err
	}
	for _, p := range swarmPodNames() {
		px, err := faults.NewProxy("127.0.0.1:0", strings.TrimPrefix(h.admin.Host, "https://"))
		if err != nil {
			return err
		}
		h.proxies["worker/"+p] = px
	}
	for _, c := range controllers {
		if err := tokenKubeconfig(ctx, kc, h.admin, swarmNS, manifest.ControllerName, h.kubeconfig(c), "https://"+h.proxies[c].Addr()); err != nil {
			return err
		}
		if err := h.startProc(c, filepath.Join(h.o.Bin, "slipway"), "swarm", "controller", "--namespace", swarmNS, "--kubeconfig", h.kubeconfig(c),
			"--identity", strings.ReplaceAll(c, "/", "-"), "--http", "", "--lease-duration", "6s"); err != nil {
			return err
		}
	}
	return nil
}

// start creates the workers' StatefulSet and the Swarm, plays the workers'
// kubelet, and waits until the applications run every job once.
func (s *swarmSystem) start(ctx context.Context, h *harness) error {
	var err error
	if s.kc, err = kubernetes.NewForConfig(h.env.Config); err != nil {
		return err
	}
	if s.sc, err = swarmversioned.NewForConfig(h.env.Config); err != nil {
		return err
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	labels := map[string]string{"app": "worker"}
	n := int32(swarmWorkers)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "swarm-worker", Namespace: swarmNS, Labels: map[string]string{"swarm": "work"}},
		Spec: appsv1.StatefulSetSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Finalizers: []string{swarmFinalizer}},
				Spec: corev1.PodSpec{ServiceAccountName: manifest.WorkerName, TerminationGracePeriodSeconds: new(int64),
					Containers: []corev1.Container{{Name: "worker", Image: "worker:chaos"}}}}}}
	if _, err := s.kc.AppsV1().StatefulSets(swarmNS).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the workers' StatefulSet: %w", err)
	}
	sw := &swarmv1.Swarm{ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: swarmNS}, Spec: swarmv1.SwarmSpec{
		Workers: metav1.LabelSelector{MatchLabels: map[string]string{"swarm": "work"}}, Jobs: swarmJobs, Refresh: swarmv1.RefreshReload}}
	if _, err := s.sc.SwarmV1alpha1().Swarms(swarmNS).Create(ctx, sw, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the Swarm: %w", err)
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.kubelet() }()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		ok, out := s.settled(wctx, h)
		if ok {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("every job running once: not within 3m: %s", out)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// kubelet starts and stops the workers' processes as their pods come and
// go, and keeps each pod's mount up to date, until the run ends.
func (s *swarmSystem) kubelet() {
	for s.ctx.Err() == nil {
		s.syncPods()
		select {
		case <-s.ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *swarmSystem) syncPods() {
	pods, err := s.kc.CoreV1().Pods(swarmNS).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		s.mu.Lock()
		wp := s.pods[pod.UID]
		s.shares[pod.UID] = pod.Annotations[config.ShareAnnotation]
		s.mu.Unlock()
		switch {
		case pod.DeletionTimestamp != nil && wp != nil && wp.orphan.Load():
			s.release(pod) // its processes go on: the node is gone from the API's view, not they
		case pod.DeletionTimestamp != nil && wp != nil && !wp.stopping.Swap(true):
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.stopPod(wp); s.release(pod) }()
		case pod.DeletionTimestamp != nil && wp == nil && slices.Contains(pod.Finalizers, swarmFinalizer):
			s.release(pod)
		case pod.DeletionTimestamp == nil && wp == nil && pod.Spec.NodeName != "":
			wp, err := s.startPod(pod)
			if err != nil {
				s.h.logf("start the worker of %s: %v", pod.Name, err)
				continue
			}
			s.mu.Lock()
			s.pods[pod.UID] = wp
			s.mu.Unlock()
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.mountLoop(wp) }()
		}
	}
}

// release removes the finalizer: the pod object may go.
func (s *swarmSystem) release(pod *corev1.Pod) {
	patch := fmt.Sprintf(`{"metadata":{"finalizers":null,"uid":%q}}`, pod.UID)
	_, err := s.kc.CoreV1().Pods(swarmNS).Patch(s.ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && s.ctx.Err() == nil {
		s.h.logf("release pod %s: %v", pod.Name, err)
	}
}

// startPod mounts the pod's share and starts its worker (a token bound to
// the pod, through the pod's proxy) and its application stand-in.
func (s *swarmSystem) startPod(pod *corev1.Pod) (*workerPod, error) {
	dir := filepath.Join(s.h.dir, "workers", pod.Name+"-"+string(pod.UID)[:8])
	wp := &workerPod{name: pod.Name, uid: pod.UID, dir: dir, mount: filepath.Join(dir, "mount"), out: filepath.Join(dir, "jobs"),
		ack: filepath.Join(dir, "jobs.ack"), report: filepath.Join(dir, swarmReportName), kubeconfig: filepath.Join(dir, "kubeconfig"),
		logf: filepath.Join(dir, "worker.log")}
	if err := os.MkdirAll(wp.mount, 0o755); err != nil {
		return nil, err
	}
	if err := configmount.Write(wp.mount, pod.Annotations[config.ShareAnnotation]); err != nil {
		return nil, err
	}
	px := s.h.proxies["worker/"+pod.Name]
	if px == nil {
		return nil, fmt.Errorf("no proxy for %s", pod.Name)
	}
	cfg, err := testenv.PodToken(s.ctx, s.h.env.Config, swarmNS, pod.Name)
	if err != nil {
		return nil, err
	}
	if err := writeKubeconfig(wp.kubeconfig, cfg, "https://"+px.Addr()); err != nil {
		return nil, err
	}
	uid := string(pod.UID)
	if s.has("pod-name-identity") {
		uid = pod.Name
	}
	wp.args = []string{"swarm", "worker", "--config", filepath.Join(wp.mount, swarmv1.ConfigMapKey), "--out", wp.out,
		"--ack", wp.ack, "--ack-timeout", "20s", "--pod-name", pod.Name, "--pod-uid", uid, "--namespace", swarmNS,
		"--kubeconfig", wp.kubeconfig, "--lease-duration", s.workerLease().String(), "--http", ""}
	appCtx, cancel := context.WithCancel(s.ctx)
	wp.app, wp.appDone = cancel, make(chan struct{})
	app := appcheck.StandIn{Jobs: wp.out, Ack: wp.ack, Report: wp.report, StopDelay: swarmAppStop, IgnoreDeadline: s.has("app-ignores-deadline")}
	go func() { defer close(wp.appDone); _ = app.Run(appCtx) }()
	if err := s.startWorker(wp); err != nil {
		cancel()
		return nil, err
	}
	return wp, nil
}

func (s *swarmSystem) startWorker(wp *workerPod) error {
	log, err := os.OpenFile(wp.logf, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(s.h.o.Bin, "slipway"), wp.args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start the worker of %s: %w", wp.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(exited) }()
	s.mu.Lock()
	wp.cmd, wp.exited = cmd, exited
	s.mu.Unlock()
	return nil
}

// stopPod stops the worker and the application together (an ordinary
// sidecar), SIGKILL after 30 s, and waits for both.
func (s *swarmSystem) stopPod(wp *workerPod) {
	s.mu.Lock()
	cmd, exited := wp.cmd, wp.exited
	s.mu.Unlock()
	wp.app()
	if cmd != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	<-wp.appDone
}

// mountLoop updates the pod's mount with its share annotation, a lag
// after each look (the higher the ordinal, the sooner, as kubelets differ),
// while the pod's node reaches the API server.
func (s *swarmSystem) mountLoop(wp *workerPod) {
	var ordinal int
	_, _ = fmt.Sscanf(wp.name[strings.LastIndexByte(wp.name, '-')+1:], "%d", &ordinal)
	lag := 300*time.Millisecond + time.Duration(4-ordinal%5)*500*time.Millisecond
	last := s.share(wp.uid)
	for s.ctx.Err() == nil && !wp.stopping.Load() && !wp.orphan.Load() {
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(lag):
		}
		if text := s.share(wp.uid); text != last {
			if err := configmount.Write(wp.mount, text); err == nil {
				last = text
			}
		}
	}
}

func (s *swarmSystem) share(uid types.UID) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shares[uid]
}

// swarmReportName is the name of each application stand-in's report file.
const swarmReportName = "app-runs"

// apps is what every running application stand-in reports, at one instant.
func (s *swarmSystem) apps() appcheck.Sample {
	s.mu.Lock()
	paths := map[string]string{}
	for _, wp := range s.pods {
		select {
		case <-wp.appDone:
		default:
			paths[wp.name+"/"+string(wp.uid)[:8]] = wp.report
		}
	}
	s.mu.Unlock()
	return appcheck.ReadReports(paths)
}

func (s *swarmSystem) monitorConfig(cfg *monitor.Config) { cfg.Apps = s.apps }

// appReports: every incarnation's application reports under
// <run>/workers/<pod>-<uid>/app-runs (emptied when it stops).
func (s *swarmSystem) appReports(h *harness) (string, string) {
	return filepath.Join(h.dir, "workers"), swarmReportName
}

// faultsOver: nothing more than expectedJobs.
func (s *swarmSystem) faultsOver(*monitor.Monitor) {}

// expectedJobs: every job, due within the bound from the faults' end.
func (s *swarmSystem) expectedJobs() ([]string, time.Time) {
	// A handover waits for a Lease to lapse at worst, and a job may move
	// twice (off a pod gone, back to its replacement): a long Lease takes
	// its bound along.
	return swarmJobs, time.Now().Add(max(swarmJobsWithin, 4*s.workerLease()))
}

// live is the pod's incarnation whose processes run and whose pod is not
// being stopped (nil: none).
func (s *swarmSystem) live(pod string) *workerPod {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, wp := range s.pods {
		if wp.name == pod && !wp.stopping.Load() && !wp.orphan.Load() {
			return wp
		}
	}
	return nil
}

// faultProcs: worker/<pod> is the live incarnation's worker process (kill:
// SIGKILL, restarted at once as the kubelet restarts a container, its
// application left running; pause: SIGSTOP/SIGCONT); pod/<pod> is its pod,
// whose kill is a force delete (grace 0) that leaves its processes
// running, as for a pod on a node the API server cannot reach.
func (s *swarmSystem) faultProcs() map[string]faults.Proc {
	out := map[string]faults.Proc{}
	for _, p := range swarmPodNames() {
		out["worker/"+p] = workerTarget{s: s, pod: p}
		out["pod/"+p] = podTarget{s: s, pod: p}
	}
	return out
}

type workerTarget struct {
	s   *swarmSystem
	pod string
}

func (w workerTarget) Kill() (bool, error) {
	wp := w.s.live(w.pod)
	if wp == nil {
		return false, nil
	}
	w.s.mu.Lock()
	cmd, exited := wp.cmd, wp.exited
	w.s.mu.Unlock()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
	return true, w.s.startWorker(wp)
}

func (w workerTarget) Signal(sig syscall.Signal) (bool, error) {
	wp := w.s.live(w.pod)
	if wp == nil {
		if sig == syscall.SIGCONT { // resume whatever was paused, the pod gone or not
			w.s.mu.Lock()
			defer w.s.mu.Unlock()
			for _, x := range w.s.pods {
				if x.name == w.pod && x.cmd != nil {
					_ = syscall.Kill(-x.cmd.Process.Pid, syscall.SIGCONT)
				}
			}
		}
		return false, nil
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if err := syscall.Kill(-wp.cmd.Process.Pid, sig); err != nil {
		return false, fmt.Errorf("signal %v to the worker of %s: %w", sig, w.pod, err)
	}
	return true, nil
}

type podTarget struct {
	s   *swarmSystem
	pod string
}

func (p podTarget) Kill() (bool, error) {
	wp := p.s.live(p.pod)
	if wp == nil {
		return false, nil
	}
	wp.orphan.Store(true)
	err := p.s.kc.CoreV1().Pods(swarmNS).Delete(p.s.ctx, p.pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("force-delete pod %s: %w", p.pod, err)
	}
	return true, nil
}

func (podTarget) Signal(syscall.Signal) (bool, error) { return false, nil }

// stop ends the kubelet and every process, orphans included.
func (s *swarmSystem) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	var all []*workerPod
	for _, wp := range s.pods {
		all = append(all, wp)
	}
	s.mu.Unlock()
	for _, wp := range all {
		s.stopPod(wp)
	}
}

func (s *swarmSystem) settled(ctx context.Context, _ *harness) (bool, string) {
	sw, err := s.sc.SwarmV1alpha1().Swarms(swarmNS).Get(ctx, "work", metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	running := appcheck.Running(s.apps())
	converged := sw.Status.ObservedGeneration == sw.Generation && int(sw.Status.WorkerCount) == swarmWorkers &&
		meta.IsStatusConditionTrue(sw.Status.Conditions, swarmv1.ConditionConverged)
	// Not settled while a pod has no live incarnation or one cut off from
	// the API server still runs jobs: a force-deleted pod's application
	// runs on until its jobs file lapses, its replacement still to start.
	var waiting []string
	for _, name := range swarmPodNames() {
		if s.live(name) == nil {
			waiting = append(waiting, name+" (no live incarnation)")
		}
	}
	s.mu.Lock()
	for _, wp := range s.pods {
		if wp.orphan.Load() && !isDone(wp.appDone) {
			if b, _ := os.ReadFile(wp.report); strings.TrimSpace(string(b)) != "" {
				waiting = append(waiting, wp.name+"/"+string(wp.uid)[:8]+" (cut off, still running jobs)")
			}
		}
	}
	s.mu.Unlock()
	out := fmt.Sprintf("converged %t over %d workers; the applications run %d jobs (%d wanted, once each)", converged, sw.Status.WorkerCount, len(running), len(swarmJobs))
	if len(waiting) > 0 {
		slices.Sort(waiting)
		out += "; waiting for " + strings.Join(waiting, ", ")
	}
	return converged && slices.Equal(running, swarmJobs) && len(waiting) == 0, out
}

// isDone reports whether c is closed.
func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// swarmVariants are the variants a swarm run takes, joined with commas:
// pod-name-identity (the workers hold their Leases as their pods' names,
// not their UIDs), app-ignores-deadline (the applications ignore the jobs
// file's validity), long-lease (swarmLongLease).
var swarmVariants = []string{"pod-name-identity", "app-ignores-deadline", "long-lease"}

// has reports whether the run's variant includes v.
func (s *swarmSystem) has(v string) bool {
	return slices.Contains(strings.Split(s.variant, ","), v)
}

// workerLease is the workers' --lease-duration.
func (s *swarmSystem) workerLease() time.Duration {
	if s.has("long-lease") {
		return swarmLongLease
	}
	return swarmLease
}

package controller

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/appcheck"
	"slipway.dev/slipway/ops/swarm/config"
	"slipway.dev/slipway/ops/swarm/configmount"
	"slipway.dev/slipway/ops/swarm/jobsfile"
	"slipway.dev/slipway/ops/swarm/manifest"
	"slipway.dev/slipway/ops/testenv"
)

// workerLease is the worker processes' Lease duration.
const workerLease = 3 * time.Second

// runningFinalizer holds a worker pod's object until the fleet stopped its
// worker process: the API server lets a pod go only once its containers
// stopped, as a kubelet does.
const runningFinalizer = "test.slipway.dev/worker-running"

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// slipwayBinary builds the slipway binary once for the package's tests.
func slipwayBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "swarm-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "slipway")
		out, err := exec.Command("go", "build", "-trimpath", "-tags", "urfave_cli_no_docs", "-o", binPath, "slipway.dev/slipway/cmd/slipway").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build slipway: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// fleet plays the kubelet for the worker pods kwok runs: for each scheduled
// pod it mounts the pod's share annotation in a directory of its own (updated
// through a ..data symlink swap, each pod after a lag of its own, as kubelet
// volume syncs are), starts a real `slipway swarm worker` process with the
// pod's own bound token, and, once the pod is being deleted, stops the
// process before it lets the pod object go.
type fleet struct {
	t    testing.TB
	p    *pool
	bin  string
	once bool
	dir  string
	// only, when set, picks the pods that run a worker process (the others
	// are left alone); pods, when set, lists the pods instead of the API
	// server (an informer's store, for large pools); lease is the worker
	// processes' Lease duration (default workerLease).
	only  func(pod string) bool
	pods  func() []*corev1.Pod
	lease time.Duration
	// app, when set, runs an application stand-in (package appcheck) beside
	// each worker, taking app.stop to stop a job; what runs is then what
	// the stand-ins report, not the workers' jobs files.
	app *appMode

	mu     sync.Mutex
	procs  map[types.UID]*proc
	shares map[types.UID]string // each pod's share annotation, as the API server has it
	wg     sync.WaitGroup
}

// proc is one worker process and its pod's mount.
type proc struct {
	name       string
	uid        types.UID
	mount, out string
	lag        time.Duration
	link       *link
	bin        string
	args       []string
	cmd        *exec.Cmd
	exited     chan struct{}
	stopping   atomic.Bool
	// orphan marks processes left running when their pod is deleted (a
	// force delete of a pod on an unreachable node).
	orphan atomic.Bool
	// the application stand-in beside the worker (fleet.app).
	appCmd      *exec.Cmd
	appExited   chan struct{}
	report, ack string
	// order is how the pod's containers are stopped (fleet.app).
	order stopOrder
}

// appMode is how the fleet runs the applications beside the workers.
type appMode struct {
	// stop is how long an application takes to stop a job.
	stop time.Duration
	// ack gives the worker --ack and the application its file.
	ack bool
	// order is how the kubelet stops a pod's containers.
	order stopOrder
}

// stopOrder is how a pod's containers are stopped on its deletion.
type stopOrder int

const (
	// together: both receive SIGTERM at once (an ordinary sidecar).
	together stopOrder = iota
	// appFirst: the worker receives SIGTERM once the application exited
	// (a native sidecar: an init container with restartPolicy Always).
	appFirst
)

func newFleet(t testing.TB, p *pool, once bool) *fleet {
	return startFleet(&fleet{t: t, p: p, once: once})
}

// startFleet fills in and starts f.
func startFleet(f *fleet) *fleet {
	t := f.t
	f.bin, f.dir, f.procs, f.shares = slipwayBinary(t), t.TempDir(), map[types.UID]*proc{}, map[types.UID]string{}
	if f.app != nil {
		standInBinary(t)
	}
	if f.lease == 0 {
		f.lease = workerLease
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.wg.Add(1)
	go func() { defer f.wg.Done(); f.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		f.wg.Wait()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, pr := range f.procs {
			pr.stop()
		}
	})
	return f
}

// workerTemplate is the workers' pod template: the workers' ServiceAccount
// (its token reports the version), and the finalizer the fleet removes once
// it stopped the pod's worker.
func workerTemplate() corev1.PodTemplateSpec {
	tmpl := podTemplate(map[string]string{"app": "worker"})
	tmpl.Finalizers = []string{runningFinalizer}
	tmpl.Spec.ServiceAccountName = manifest.WorkerName
	return tmpl
}

func (f *fleet) run(ctx context.Context) {
	for ctx.Err() == nil {
		f.syncPods(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// syncPods reads the pods (and their share annotations), starts the
// workers of new scheduled pods and stops those of pods being deleted.
func (f *fleet) syncPods(ctx context.Context) {
	for _, pod := range f.list(ctx) {
		if f.only != nil && !f.only(pod.Name) {
			continue
		}
		f.mu.Lock()
		pr := f.procs[pod.UID]
		f.shares[pod.UID] = pod.Annotations[config.ShareAnnotation]
		f.mu.Unlock()
		switch {
		case pod.DeletionTimestamp != nil && pr != nil && pr.orphan.Load():
			f.release(ctx, pod.Name, pod.UID) // its node is gone from the API's view, not its processes
		case pod.DeletionTimestamp != nil && pr != nil && !pr.stopping.Swap(true):
			f.wg.Add(1)
			go func() { defer f.wg.Done(); pr.stop(); f.release(ctx, pod.Name, pod.UID) }()
		case pod.DeletionTimestamp != nil && pr == nil && slices.Contains(pod.Finalizers, runningFinalizer):
			f.release(ctx, pod.Name, pod.UID)
		case pod.DeletionTimestamp == nil && pr == nil && pod.Spec.NodeName != "":
			if pr, err := f.start(ctx, pod.Name, pod.UID); err != nil {
				f.t.Logf("start the worker of %s: %v", pod.Name, err)
			} else {
				f.mu.Lock()
				f.procs[pod.UID] = pr
				f.mu.Unlock()
				f.wg.Add(1)
				go func() { defer f.wg.Done(); f.kubelet(ctx, pr) }()
			}
		}
	}
}

// list is the pods of the pool, from f.pods or the API server.
func (f *fleet) list(ctx context.Context) []*corev1.Pod {
	if f.pods != nil {
		return f.pods()
	}
	pods, err := f.p.kube.CoreV1().Pods(f.p.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	out := make([]*corev1.Pod, len(pods.Items))
	for i := range pods.Items {
		out[i] = &pods.Items[i]
	}
	return out
}

// start mounts the config for the pod and starts its worker process with
// the token the pod would mount.
func (f *fleet) start(ctx context.Context, name string, uid types.UID) (*proc, error) {
	dir := filepath.Join(f.dir, string(uid))
	pr := &proc{name: name, uid: uid, mount: filepath.Join(dir, "mount"), out: filepath.Join(dir, "jobs"),
		lag: volumeLag(name), exited: make(chan struct{})}
	if err := os.MkdirAll(pr.mount, 0o755); err != nil {
		return nil, err
	}
	if err := configmount.Write(pr.mount, f.share(uid)); err != nil {
		return nil, err
	}
	cfg, err := testenv.PodToken(ctx, env.Config, f.p.ns, name)
	if err != nil {
		return nil, err
	}
	if pr.link, err = newLink(cfg.Host); err != nil {
		return nil, err
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(kc, pr.link.url, cfg.BearerToken, cfg.CAData, cfg.CAFile); err != nil {
		return nil, err
	}
	args := []string{"swarm", "worker", "--config", filepath.Join(pr.mount, swarmv1.ConfigMapKey), "--out", pr.out,
		"--pod-name", name, "--pod-uid", string(uid), "--namespace", f.p.ns, "--kubeconfig", kc, "--lease-duration", f.lease.String(),
		"--http", "127.0.0.1:0"}
	if f.once {
		args = append(args, "--once")
	}
	if f.app != nil {
		pr.report, pr.order = filepath.Join(dir, "app-runs"), f.app.order
		if f.app.ack {
			pr.ack = filepath.Join(dir, "jobs.ack")
			args = append(args, "--ack", pr.ack, "--ack-timeout", "20s")
		}
		if err := pr.startApp(f.app.stop); err != nil {
			return nil, err
		}
	}
	pr.bin, pr.args = f.bin, args
	if err := pr.startWorker(); err != nil {
		return nil, err
	}
	return pr, nil
}

// startWorker starts the pod's worker process (again, after a crash).
func (pr *proc) startWorker() error {
	log, err := os.OpenFile(filepath.Join(filepath.Dir(pr.out), "worker.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd, exited := exec.Command(pr.bin, pr.args...), make(chan struct{})
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	pr.cmd, pr.exited = cmd, exited
	go func() { _ = cmd.Wait(); log.Close(); close(exited) }()
	return nil
}

// proc is the live process of the pod named, nil when none.
func (f *fleet) proc(pod string) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, pr := range f.procs {
		if pr.name == pod && !pr.stopping.Load() {
			return pr
		}
	}
	return nil
}

// signal sends sig to the worker process of pod (not to its application).
func (f *fleet) signal(pod string, sig syscall.Signal) {
	f.t.Helper()
	pr := f.proc(pod)
	if pr == nil {
		f.t.Fatalf("no worker process for %s", pod)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := pr.cmd.Process.Signal(sig); err != nil {
		f.t.Fatalf("signal the worker of %s: %v", pod, err)
	}
}

// forceDelete deletes pod at once (grace 0) while its processes go on
// running, as a force delete of a pod on an unreachable node leaves them.
func (f *fleet) forceDelete(pod string) {
	f.t.Helper()
	pr := f.proc(pod)
	if pr == nil {
		f.t.Fatalf("no worker process for %s", pod)
	}
	pr.orphan.Store(true)
	err := f.p.kube.CoreV1().Pods(f.p.ns).Delete(context.Background(), pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if err != nil {
		f.t.Fatal(err)
	}
}

// crash kills the worker process of pod (SIGKILL: no clean-up) and starts
// it again after backoff, as the kubelet restarts a crashed container,
// its application left running.
func (f *fleet) crash(pod string, backoff time.Duration) {
	f.t.Helper()
	pr := f.proc(pod)
	if pr == nil {
		f.t.Fatalf("no worker process for %s", pod)
	}
	f.mu.Lock()
	cmd, exited := pr.cmd, pr.exited
	f.mu.Unlock()
	_ = cmd.Process.Kill()
	<-exited
	time.Sleep(backoff)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := pr.startWorker(); err != nil {
		f.t.Fatalf("restart the worker of %s: %v", pod, err)
	}
}

// volumeLag is how late the kubelet of a pod updates its ConfigMap volume:
// the higher the ordinal, the sooner (from 2.3 s for swarm-worker-0 down to
// 0.3 s), so a worker added by a scale up sees a change before the workers
// that held its jobs do, as happens with real kubelets.
func volumeLag(pod string) time.Duration {
	i := strings.LastIndexByte(pod, '-')
	n, _ := strconv.Atoi(pod[i+1:])
	return 300*time.Millisecond + time.Duration(4-n%5)*500*time.Millisecond
}

// share is the pod's share annotation, as the API server has it.
func (f *fleet) share(uid types.UID) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.shares[uid]
}

// kubelet updates the pod's mount with its share annotation (as the
// downwardAPI volume is), lag after each look.
func (f *fleet) kubelet(ctx context.Context, pr *proc) {
	last := f.share(pr.uid)
	for ctx.Err() == nil && !pr.stopping.Load() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(pr.lag + 100*time.Millisecond):
		}
		if pr.link.cut.Load() {
			continue // the node is cut off: its kubelet cannot sync the volume either
		}
		if text := f.share(pr.uid); text != last {
			if err := configmount.Write(pr.mount, text); err == nil {
				last = text
			}
		}
	}
}

// stop ends the pod's processes, in the pod's order, and waits for them.
func (pr *proc) stop() {
	if pr.link != nil {
		defer pr.link.close()
	}
	if pr.appCmd != nil && pr.order == appFirst {
		terminate(pr.appCmd, pr.appExited, 30*time.Second)
	}
	if pr.appCmd != nil && pr.order == together {
		_ = pr.appCmd.Process.Signal(syscall.SIGTERM)
		defer terminate(pr.appCmd, pr.appExited, 30*time.Second)
	}
	if pr.cmd == nil || pr.cmd.Process == nil {
		return
	}
	terminate(pr.cmd, pr.exited, 30*time.Second)
}

// terminate sends cmd SIGTERM and waits for it to exit, killing it after
// grace, as the kubelet does.
func terminate(cmd *exec.Cmd, exited chan struct{}, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

var (
	standInOnce sync.Once
	standInPath string
	standInErr  error
)

// standInBinary builds the application stand-in once for the package.
func standInBinary(t testing.TB) string {
	t.Helper()
	standInOnce.Do(func() {
		dir, err := os.MkdirTemp("", "swarm-app-")
		if err != nil {
			standInErr = err
			return
		}
		standInPath = filepath.Join(dir, "swarm-app-standin")
		out, err := exec.Command("go", "build", "-trimpath", "-o", standInPath, "slipway.dev/slipway/ops/swarm/appcheck/cmd/swarm-app-standin").CombinedOutput()
		if err != nil {
			standInErr = fmt.Errorf("build the application stand-in: %v\n%s", err, out)
		}
	})
	if standInErr != nil {
		t.Fatal(standInErr)
	}
	return standInPath
}

// startApp starts the application stand-in beside the pod's worker.
func (pr *proc) startApp(stop time.Duration) error {
	args := []string{"--jobs", pr.out, "--report", pr.report, "--stop-delay", stop.String()}
	if pr.ack != "" {
		args = append(args, "--ack", pr.ack)
	}
	log, err := os.Create(filepath.Join(filepath.Dir(pr.out), "app.log"))
	if err != nil {
		return err
	}
	pr.appCmd, pr.appExited = exec.Command(standInPath, args...), make(chan struct{})
	pr.appCmd.Stdout, pr.appCmd.Stderr = log, log
	if err := pr.appCmd.Start(); err != nil {
		log.Close()
		return err
	}
	go func() { _ = pr.appCmd.Wait(); log.Close(); close(pr.appExited) }()
	return nil
}

// appRunning reports whether the pod's application stand-in still runs.
func (pr *proc) appRunning() bool {
	select {
	case <-pr.appExited:
		return false
	default:
		return true
	}
}

// partition cuts (or heals) the network between a pod's node and the API
// server: its worker can reach it no more, nor can its kubelet update the
// pod's ConfigMap volume.
func (f *fleet) partition(pod string, cut bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, pr := range f.procs {
		if pr.name == pod && pr.running() {
			pr.link.cut.Store(cut)
			if cut {
				pr.link.drop()
			}
		}
	}
}

// running reports whether the process still runs.
func (pr *proc) running() bool {
	select {
	case <-pr.exited:
		return false
	default:
		return true
	}
}

// release removes the running finalizer: the pod may go.
func (f *fleet) release(ctx context.Context, name string, uid types.UID) {
	patch := fmt.Sprintf(`{"metadata":{"finalizers":null,"uid":%q}}`, uid)
	_, err := f.p.kube.CoreV1().Pods(f.p.ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil && ctx.Err() == nil {
		f.t.Logf("release pod %s: %v", name, err)
	}
}

func writeKubeconfig(path, host, token string, ca []byte, caFile string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca, CertificateAuthority: caFile}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	return clientcmd.WriteToFile(*cfg, path)
}

// runs is a consistent sample of what each live worker process runs (its
// jobs file, which the application reads): every file is read, then
// checked unchanged (same inode) after all were read, so the contents held
// together at one instant; a round that saw a file change is taken again.
// With application stand-ins (f.app) it is what the applications report
// they run instead, from every stand-in still running.
func (f *fleet) runs() map[string][]string {
	if f.app != nil {
		return f.appRuns()
	}
	f.mu.Lock()
	var live []*proc
	for _, pr := range f.procs {
		if pr.running() {
			live = append(live, pr)
		}
	}
	f.mu.Unlock()
	for {
		out := map[string][]string{}
		inodes := map[*proc]uint64{}
		for _, pr := range live {
			b, ino := readWithInode(pr.out)
			inodes[pr] = ino
			if jf, _ := jobsfile.Parse(string(b)); len(jf.Jobs) > 0 {
				out[pr.name+"/"+string(pr.uid)[:8]] = jf.Jobs
			}
		}
		stable := true
		for _, pr := range live {
			if _, ino := readWithInode(pr.out); ino != inodes[pr] {
				stable = false
			}
		}
		if stable {
			return out
		}
	}
}

// appRuns is what each running application stand-in reports it runs, read
// at one instant.
func (f *fleet) appRuns() map[string][]string {
	f.mu.Lock()
	paths := map[string]string{}
	for _, pr := range f.procs {
		if pr.appCmd != nil && pr.appRunning() {
			paths[pr.name+"/"+string(pr.uid)[:8]] = pr.report
		}
	}
	f.mu.Unlock()
	return appcheck.ReadReports(paths)
}

func readWithInode(path string) ([]byte, uint64) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, 0
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, 0
	}
	b, _ := io.ReadAll(fh)
	if st2, err := os.Stat(path); err != nil || !os.SameFile(st, st2) {
		return nil, 1 // replaced while read: the round is taken again
	}
	return b, st.Sys().(*syscall.Stat_t).Ino
}

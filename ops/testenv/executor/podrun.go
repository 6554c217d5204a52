package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// podRun is one pod being run by the executor.
type podRun struct {
	x       *Executor
	pod     *corev1.Pod
	nodeDir string
	hostIP  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the current process ends
	deleted bool
	done    bool
}

func newPodRun(x *Executor, pod *corev1.Pod, node *corev1.Node) *podRun {
	r := &podRun{x: x, pod: pod, nodeDir: filepath.Join(x.opts.NodesRoot, node.Name)}
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			r.hostIP = a.Address
		}
	}
	return r
}

// run starts the container's command, restarting it on failure when the pod
// asks for that, and reports each state to the API server.
func (r *podRun) run(ctx context.Context) {
	log := r.x.opts.Log.With("pod", r.pod.Namespace+"/"+r.pod.Name, "node", r.pod.Spec.NodeName)
	st := run{hostIP: r.hostIP}
	if deadline := r.pod.Spec.ActiveDeadlineSeconds; deadline != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*deadline)*time.Second)
		defer cancel()
	}
	for {
		st.started, st.done, st.podReason = metav1.Now(), false, ""
		cmd, logPath, err := r.prepare()
		if err == nil {
			err = r.start(cmd)
		}
		if err != nil {
			log.Warn("cannot start the pod's command", "err", err)
			st.finished, st.done, st.exitCode, st.reason, st.message = st.started, true, 127, "StartError", err.Error()
			r.report(ctx, st)
			break
		}
		log.Info("running", "command", cmd.Args, "log", logPath)
		r.report(ctx, st)
		code, deadline := r.wait(ctx)
		st.finished, st.done, st.exitCode, st.reason = metav1.Now(), true, code, terminationReason(code)
		if deadline {
			st.podReason, st.message = "DeadlineExceeded", "pod's activeDeadlineSeconds passed"
		} else if code != 0 {
			st.message = strings.TrimSpace(tail(logPath, 2048))
		}
		log.Info("exited", "code", code)
		if code == 0 || deadline || r.pod.Spec.RestartPolicy != corev1.RestartPolicyOnFailure || r.isDeleted() || ctx.Err() != nil {
			r.report(ctx, st)
			break
		}
		last := corev1.ContainerStateTerminated{ExitCode: code, Reason: st.reason, Message: st.message, StartedAt: st.started, FinishedAt: st.finished}
		st.last, st.restarts, st.message = &last, st.restarts+1, ""
	}
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
}

// prepare builds the command of the pod's only container.
func (r *podRun) prepare() (*exec.Cmd, string, error) {
	if len(r.pod.Spec.Containers) != 1 {
		return nil, "", fmt.Errorf("the executor runs pods of exactly one container, this one has %d", len(r.pod.Spec.Containers))
	}
	c := r.pod.Spec.Containers[0]
	mounts, err := hostMounts(r.pod, c, r.nodeDir)
	if err != nil {
		return nil, "", err
	}
	argv := append(append([]string{}, c.Command...), c.Args...)
	if len(c.Command) == 0 {
		return nil, "", errors.New("container has no command: the executor cannot know an image's entrypoint")
	}
	for i := range argv {
		argv[i] = rewritePaths(argv[i], mounts)
	}
	bin := resolveCommand(argv[0], r.x.opts.Path, isExecutable)
	if bin == "" {
		return nil, "", fmt.Errorf("%s not found in the executor's path %s", argv[0], r.x.opts.Path)
	}
	logDir := filepath.Join(r.nodeDir, "pods")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, "", fmt.Errorf("create %s: %w", logDir, err)
	}
	logPath := filepath.Join(logDir, r.pod.Namespace+"_"+r.pod.Name+".log")
	cmd := exec.Command(bin, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Dir = r.nodeDir
	cmd.Env = append(append([]string{"PATH=" + r.x.opts.Path, "HOME=" + r.nodeDir,
		"NODE_NAME=" + r.pod.Spec.NodeName, "SLIPWAY_NODE_DIR=" + r.nodeDir}, r.x.opts.Env...), containerEnv(r.pod, c, r.hostIP, mounts)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", fmt.Errorf("open pod log: %w", err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	return cmd, logPath, nil
}

// start starts cmd unless the pod is already being deleted.
func (r *podRun) start(cmd *exec.Cmd) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deleted {
		return errors.New("pod deleted before its command started")
	}
	if err := cmd.Start(); err != nil {
		cmd.Stdout.(*os.File).Close()
		return err
	}
	r.cmd, r.exited = cmd, make(chan struct{})
	return nil
}

// wait waits for the process; on ctx's end (executor stop or the pod's deadline) it kills it.
func (r *podRun) wait(ctx context.Context) (code int32, deadline bool) {
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
			r.kill(2 * time.Second)
		case <-exited:
		}
	}()
	err := cmd.Wait()
	cmd.Stdout.(*os.File).Close()
	close(exited)
	deadline = errors.Is(ctx.Err(), context.DeadlineExceeded)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, deadline
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int32(ws.Signal()), deadline
		}
		return int32(ee.ExitCode()), deadline
	default:
		return 1, deadline
	}
}

// kill sends SIGTERM to the process group, then SIGKILL after grace.
func (r *podRun) kill(grace time.Duration) {
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// markDeleted records that the pod is being deleted; true the first time.
func (r *podRun) markDeleted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := !r.deleted
	r.deleted = true
	return first
}

func (r *podRun) isDeleted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deleted
}

func (r *podRun) ended() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done
}

// report writes the pod status for st, retrying on conflicts; a deleted pod is not reported.
func (r *podRun) report(ctx context.Context, st run) {
	if r.isDeleted() {
		return
	}
	pods := r.x.opts.Client.CoreV1().Pods(r.pod.Namespace)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := pods.Get(context.WithoutCancel(ctx), r.pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != r.pod.UID {
			return nil
		}
		cur.Status = podStatus(cur, st)
		_, err = pods.UpdateStatus(context.WithoutCancel(ctx), cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !r.isDeleted() {
		r.x.opts.Log.Warn("cannot report pod status", "pod", r.pod.Namespace+"/"+r.pod.Name, "err", err)
	}
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// tail returns at most n bytes from the end of a file.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, 2)
	}
	b := make([]byte, n)
	k, _ := f.Read(b)
	return string(b[:k])
}

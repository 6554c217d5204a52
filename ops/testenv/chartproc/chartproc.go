// Package chartproc runs what a Helm release installed as a kubelet would
// run it, for tests on the simulated cluster (whose kwok pods run nothing):
// the first container of a Deployment the release applied, with the
// arguments the API server holds ($(VAR) references expanded from the pod's
// environment), as the pod's ServiceAccount, stopped as a replaced pod is
// (SIGTERM, then SIGKILL after the grace period); and the pinned helm that
// scripts/install-tools links into the tools directory.
package chartproc

import (
	"bytes"
	"context"
	"fmt"
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
	"k8s.io/client-go/tools/clientcmd"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/tools"
)

// Helm runs the pinned helm with args (its cache, config and data homes
// the test's own) and returns its standard output; a failure, or a missing
// helm, fails t.
func Helm(t testing.TB, args ...string) []byte {
	t.Helper()
	helm, err := tools.Binary(context.Background(), "helm")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helm, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// Process is a Deployment's container running on this host.
type Process struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (p *Process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// Options name the workload whose first container Start runs, and how.
type Options struct {
	// Bin is the binary the container's image would run.
	Bin string
	// Kind is the workload's kind: Deployment (the default) or DaemonSet.
	Kind string
	// Namespace and Name name the workload as the release applied it.
	Namespace, Name string
	// Pod is the pod's metadata.name (the identity its token is bound to).
	Pod string
	// Node is the pod's spec.nodeName; when set, the token is bound to the
	// node too, as a DaemonSet pod's is. Empty: the Env's first node for
	// spec.nodeName, and a token bound to no node.
	Node string
	// Edit, when set, rewrites the expanded arguments (a pod's ports would
	// collide on this host).
	Edit func([]string) []string
}

// Start runs the first container of the workload o names, as read from
// the API server: its command after the binary and its arguments, $(VAR)
// references expanded from the pod's environment, as the pod's
// ServiceAccount. The process is stopped when the test ends and its
// output logged if the test failed.
func Start(t testing.TB, e *testenv.Env, cs kubernetes.Interface, o Options) *Process {
	t.Helper()
	spec := podSpec(t, cs, o)
	node := o.Node
	if node == "" && len(e.Nodes) > 0 {
		node = e.Nodes[0]
	}
	cfg, err := testenv.KubeconfigAs(e.Kubeconfig, testenv.ServiceAccount(o.Namespace, spec.ServiceAccountName), o.Node)
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	ctr := spec.Containers[0]
	vars, order := containerEnv(ctr, map[string]string{
		"metadata.name": o.Pod, "metadata.namespace": o.Namespace, "spec.nodeName": node,
	})
	env := append(os.Environ(), "KUBECONFIG="+kc)
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	var args []string
	for _, a := range append(ctr.Command[min(len(ctr.Command), 1):], ctr.Args...) {
		for _, k := range order {
			a = strings.ReplaceAll(a, "$("+k+")", vars[k])
		}
		args = append(args, a)
	}
	if o.Edit != nil {
		args = o.Edit(args)
	}
	return run(t, o.Bin, args, env, o.Pod)
}

// podSpec is the pod template of the workload o names.
func podSpec(t testing.TB, cs kubernetes.Interface, o Options) corev1.PodSpec {
	t.Helper()
	ctx := context.Background()
	switch o.Kind {
	case "", "Deployment":
		dep, err := cs.AppsV1().Deployments(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("read Deployment %s/%s: %v", o.Namespace, o.Name, err)
		}
		return dep.Spec.Template.Spec
	case "DaemonSet":
		ds, err := cs.AppsV1().DaemonSets(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("read DaemonSet %s/%s: %v", o.Namespace, o.Name, err)
		}
		return ds.Spec.Template.Spec
	}
	t.Fatalf("chartproc: kind %q is neither Deployment nor DaemonSet", o.Kind)
	return corev1.PodSpec{}
}

// containerEnv is ctr's environment, fieldRefs resolved from fields (one
// it cannot resolve is left out, as the test cannot know it), with the
// names in their order.
func containerEnv(ctr corev1.Container, fields map[string]string) (map[string]string, []string) {
	vars := map[string]string{}
	var order []string
	for _, v := range ctr.Env {
		val := v.Value
		if v.ValueFrom != nil {
			if v.ValueFrom.FieldRef == nil {
				continue
			}
			f, ok := fields[v.ValueFrom.FieldRef.FieldPath]
			if !ok {
				continue
			}
			val = f
		}
		vars[v.Name] = val
		order = append(order, v.Name)
	}
	return vars, order
}

// run starts bin with args and env, stopped when the test ends.
func run(t testing.TB, bin string, args, env []string, pod string) *Process {
	t.Helper()
	p := &Process{done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		fmt.Fprintf(p, "exit: %v\n", err)
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("%s (%v):\n%s", pod, p.cmd.Args, p.out.String())
			p.mu.Unlock()
		}
	})
	return p
}

// Stop ends the process as the kubelet ends a replaced pod: SIGTERM, then
// SIGKILL after a 30 s grace period.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

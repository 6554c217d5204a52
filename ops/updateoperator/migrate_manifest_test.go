package updateoperator

import (
	"context"
	"flag"
	"fmt"
	"io"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"slipway.dev/slipway/ops/testenv"
)

// The migration as a user makes it: the objects of `slipway update-operator
// manifest --platform bottlerocket-api --prefix bottlerocket.aws` applied
// to the control plane (namespace, ServiceAccounts, RBAC, the admission
// policies, the agent DaemonSet: its controller makes one agent pod per
// node), the controller and the agents run with the args the manifest's
// containers carry and with the tokens their pods get (a TokenRequest bound
// to the DaemonSet's pod on each node, the controller's to a pod of its
// ServiceAccount on a node no update touches), over six nodes on the
// Bottlerocket API emulator left in each state the old operator leaves. A
// permission or a policy the migration needs and the manifest lacks fails
// it. Every node ends updated once, none rebooted twice, none cordoned.
func TestMigrationWithTheManifest(t *testing.T) {
	e := testenv.Need(t, env)
	ctx := context.Background()
	const ns = "uo-mfmigrate"
	objs, err := ManifestObjects(ManifestOptions{Namespace: ns, Prefix: BottlerocketPrefix, Platform: "bottlerocket-api"})
	if err != nil {
		t.Fatal(err)
	}
	kc := kubernetes.NewForConfigOrDie(e.Config)
	dyn := dynamic.NewForConfigOrDie(e.Config)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kc.Discovery()))
	var controllerArgs, agentArgs []string
	for _, obj := range objs {
		switch o := obj.(type) {
		case *appsv1.Deployment: // its pod would be a fake of kwok's: the controller runs here, with its args
			controllerArgs = o.Spec.Template.Spec.Containers[0].Args
			continue
		case *appsv1.DaemonSet:
			agentArgs = o.Spec.Template.Spec.Containers[0].Args
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		apply(ctx, t, dyn, mapper, &unstructured.Unstructured{Object: u})
	}
	t.Cleanup(func() { _ = kc.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	if controllerArgs == nil || agentArgs == nil {
		t.Fatalf("the manifest has no controller Deployment or agent DaemonSet")
	}

	f := newFleetOn(t, e, "mfmigrate")
	f.usePrefix(BottlerocketPrefix)
	leaveAsTheOldOperator(t, f, "mfmigrate")
	for _, n := range f.nodes { // the old operator's users labelled its nodes (its agent DaemonSet selects the same label)
		f.patch(n, map[string]any{"metadata": map[string]any{"labels": map[string]any{f.keys.InterfaceVersion(): InterfaceVersion}}})
	}
	// The controller's pod, on a node no update touches (excluded).
	ctl := testenv.FakeNode("mfmigrate-ctl")
	ctl.Labels[f.keys.Exclude()] = "true"
	if _, err := kc.CoreV1().Nodes().Create(ctx, ctl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kc.CoreV1().Nodes().Delete(context.Background(), ctl.Name, metav1.DeleteOptions{}) })
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "controller", Namespace: ns}, Spec: corev1.PodSpec{ServiceAccountName: ControllerName,
		NodeName: ctl.Name, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/fake"}}}}
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctlCfg, err := testenv.PodToken(ctx, e.Config, ns, p.Name)
	if err != nil {
		t.Fatal(err)
	}
	// Each agent's token: bound to the DaemonSet's pod on its node (the
	// nodes carry the interface-version label the DaemonSet selects).
	tokens := map[string]*rest.Config{}
	eventually(t, 2*time.Minute, "an agent pod of the manifest's DaemonSet on every node", func() (bool, string) {
		pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if p.Spec.ServiceAccountName == AgentName && p.Spec.NodeName != "" && tokens[p.Spec.NodeName] == nil {
				if cfg, err := testenv.PodToken(ctx, e.Config, ns, p.Name); err == nil {
					tokens[p.Spec.NodeName] = cfg
				}
			}
		}
		missing := 0
		for _, n := range f.nodes {
			if tokens[n] == nil {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d nodes without an agent pod", missing)
	})
	agentEdit := agentFromArgs(t, agentArgs)
	f.agentEdit = func(node string, o *AgentOptions) {
		o.Config = tokens[node]
		agentEdit(o)
	}
	f.mu.Lock()
	f.closed = false
	f.mu.Unlock()
	for _, n := range f.nodes {
		f.startAgent(n)
	}
	stop := f.controller(func(o *ControllerOptions) {
		controllerFromArgs(t, controllerArgs, o)
		o.Config, o.NodeName = ctlCfg, ctl.Name
		o.Policy.MaxConcurrent = 2 // as the in-process migration test: the manifest's default is 1
		o.Policy.PauseBetween = 0
	})
	defer stop()
	eventually(t, 4*time.Minute, "every node updated, none cordoned", f.done)
	for _, n := range f.nodes {
		if r := f.br[n].Reboots(); r != 1 {
			t.Errorf("%s rebooted %d times, want once (the old operator's reboot counted)", n, r)
		}
	}
}

// controllerFromArgs sets o from the manifest controller's args (after
// `update-operator controller`): every flag it carries is mapped, an
// unknown one fails the test (map it here).
func controllerFromArgs(t *testing.T, args []string, o *ControllerOptions) {
	t.Helper()
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.Prefix, "prefix", o.Prefix, "")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "")
	fs.StringVar(&o.LeaseName, "lease", o.LeaseName, "")
	fs.StringVar(&o.OSImagePattern, "os-image-pattern", o.OSImagePattern, "")
	if len(args) < 2 || args[0] != "update-operator" || args[1] != "controller" {
		t.Fatalf("the manifest's controller runs %v, not update-operator controller", args)
	}
	if err := fs.Parse(args[2:]); err != nil || fs.NArg() > 0 {
		t.Fatalf("the manifest's controller args %v: %v (map the flag in controllerFromArgs)", args, err)
	}
}

// agentFromArgs is what the manifest agent's args set: the platform must
// be the Bottlerocket API (served here by the emulator, on its socket);
// metrics are left off (every agent runs in this process).
func agentFromArgs(t *testing.T, args []string) func(*AgentOptions) {
	t.Helper()
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	prefix := fs.String("prefix", DefaultPrefix, "")
	plat := fs.String("platform", "slipway", "")
	fs.String("metrics-addr", "", "")
	if len(args) < 2 || args[0] != "update-operator" || args[1] != "agent" {
		t.Fatalf("the manifest's agent runs %v, not update-operator agent", args)
	}
	if err := fs.Parse(args[2:]); err != nil || fs.NArg() > 0 {
		t.Fatalf("the manifest's agent args %v: %v (map the flag in agentFromArgs)", args, err)
	}
	if *plat != "bottlerocket-api" {
		t.Fatalf("the manifest's agent runs --platform %s, want bottlerocket-api", *plat)
	}
	return func(o *AgentOptions) { o.Prefix = *prefix }
}

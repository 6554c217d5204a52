package updateoperator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"slipway.dev/slipway/ops/testenv"
)

// The manifest applies to a real API server; its RBAC grants the
// controller and the agent what they call and nothing more; and its
// admission policy holds an agent to its own Node and its protocol's keys.
func TestManifestAppliesAndConfinesTheAgent(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "uo-manifest"
	objs, err := ManifestObjects(ManifestOptions{Namespace: ns, Prefix: "mf.update.slipway.dev", Platform: "bottlerocket-api"})
	if err != nil {
		t.Fatal(err)
	}
	kc := kubernetes.NewForConfigOrDie(e.Config)
	dyn := dynamic.NewForConfigOrDie(e.Config)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kc.Discovery()))
	for _, obj := range objs {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		apply(ctx, t, dyn, mapper, &unstructured.Unstructured{Object: u})
	}
	var out bytes.Buffer
	if err := Manifest(ctx, ManifestOptions{Namespace: ns, Out: &out}); err != nil || !strings.Contains(out.String(), "kind: ValidatingAdmissionPolicy") {
		t.Errorf("Manifest wrote %d bytes, err %v", out.Len(), err)
	}
	checkAccess(ctx, t, kc, "system:serviceaccount:"+ns+":"+ControllerName,
		[]authv1.ResourceAttributes{{Verb: "patch", Resource: "nodes"}, {Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "x"},
			{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: LeaseName}, {Verb: "create", Resource: "events", Namespace: "default"},
			{Verb: "get", Group: "apps", Resource: "deployments", Namespace: "x"}},
		[]authv1.ResourceAttributes{{Verb: "delete", Resource: "nodes"}, {Verb: "delete", Resource: "pods", Namespace: "x"},
			{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: "another"},
			{Verb: "get", Resource: "secrets", Namespace: ns}, {Verb: "update", Group: "apps", Resource: "deployments", Namespace: "x"}})
	agentSA := "system:serviceaccount:" + ns + ":" + AgentName
	checkAccess(ctx, t, kc, agentSA,
		[]authv1.ResourceAttributes{{Verb: "patch", Resource: "nodes"}, {Verb: "watch", Resource: "nodes"}, {Verb: "create", Resource: "events", Namespace: "default"}},
		[]authv1.ResourceAttributes{{Verb: "list", Resource: "pods"}, {Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "x"},
			{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: ns}, {Verb: "delete", Resource: "nodes"}})
	checkAgentPolicy(ctx, t, e, agentSA)
}

// checkAgentPolicy patches Nodes as the agent of one of them, with the
// node name the API server would put in its bound token.
func checkAgentPolicy(ctx context.Context, t *testing.T, e *testenv.Env, sa string) {
	kc := kubernetes.NewForConfigOrDie(e.Config)
	for _, n := range []string{"mf-own", "mf-other"} {
		if _, err := kc.CoreV1().Nodes().Create(ctx, testenv.FakeNode(n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kc.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: sa, Extra: map[string][]string{"authentication.kubernetes.io/node-name": {"mf-own"}}}
	asAgent := kubernetes.NewForConfigOrDie(cfg)
	patch := func(node string, p map[string]any) error {
		data, _ := json.Marshal(p)
		_, err := asAgent.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{})
		return err
	}
	ann := func(k, v string) map[string]any {
		return map[string]any{"metadata": map[string]any{"annotations": map[string]any{k: v}}}
	}
	// The policy is loaded a moment after its creation: wait for the first denial.
	eventually(t, 30*time.Second, "the policy denies another node", func() (bool, string) {
		err := patch("mf-other", ann("mf.update.slipway.dev/action-state", "busy"))
		return err != nil && strings.Contains(err.Error(), "only the Node it runs on"), fmt.Sprint(err)
	})
	if err := patch("mf-own", ann("mf.update.slipway.dev/action-state", "busy")); err != nil {
		t.Errorf("the agent may not write its protocol on its own node: %v", err)
	}
	for what, p := range map[string]map[string]any{
		"cordon":           {"spec": map[string]any{"unschedulable": true}},
		"foreign label":    {"metadata": map[string]any{"labels": map[string]any{"evil": "true"}}},
		"other annotation": ann("drain.slipway.dev/cordoned-by", "me"),
	} {
		if err := patch("mf-own", p); err == nil {
			t.Errorf("the agent could %s its own node", what)
		}
	}
}

func checkAccess(ctx context.Context, t *testing.T, kc *kubernetes.Clientset, user string, allowed, denied []authv1.ResourceAttributes) {
	t.Helper()
	for _, want := range []struct {
		attrs []authv1.ResourceAttributes
		ok    bool
	}{{allowed, true}, {denied, false}} {
		for _, a := range want.attrs {
			r, err := kc.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authv1.SubjectAccessReview{
				Spec: authv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &a}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status.Allowed != want.ok {
				t.Errorf("%s: %s %s/%s/%s in %q: allowed = %v, want %v", user, a.Verb, a.Group, a.Resource, a.Subresource, a.Namespace, r.Status.Allowed, want.ok)
			}
		}
	}
}

func apply(ctx context.Context, t *testing.T, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, u *unstructured.Unstructured) {
	t.Helper()
	gvk := u.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("map %s: %v", gvk, err)
	}
	data, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if u.GetNamespace() != "" {
		ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	force := true
	if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "slipway-test", Force: &force}); err != nil {
		t.Fatalf("apply %s %s: %v", gvk.Kind, u.GetName(), err)
	}
}

// On Bottlerocket the agent runs as SELinux type super_t, the only type the
// host lets connect to its API socket; elsewhere no SELinux label is set.
func TestAgentRunsAsSuperTOnBottlerocket(t *testing.T) {
	for _, tc := range []struct {
		platform string
		want     string
	}{{"bottlerocket-api", "super_t"}, {"slipway", ""}, {"command", ""}} {
		objs, err := ManifestObjects(ManifestOptions{Platform: tc.platform})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			ds, ok := o.(*appsv1.DaemonSet)
			if !ok {
				continue
			}
			sc := ds.Spec.Template.Spec.Containers[0].SecurityContext
			got := ""
			if sc != nil && sc.SELinuxOptions != nil {
				got = sc.SELinuxOptions.Type
			}
			if got != tc.want {
				t.Errorf("%s: the agent's SELinux type is %q, want %q", tc.platform, got, tc.want)
			}
		}
	}
}

// The agent pod reaches no host socket it does not need: no host path
// holds the system bus, the container runtime's socket or any other of
// the host's /run (a read-only bind mount does not stop connect(2)), and
// nothing opens the host's filesystem through /proc/1/root (not
// privileged, no CAP_SYS_PTRACE). Only the slipway platform shares the
// host's PID namespace (its init is told from PID 1 and signalled), with
// AppArmor unconfined for that signal; Bottlerocket's agent gets the host
// API's one socket.
func TestAgentReachesNoHostSocket(t *testing.T) {
	sockets := []string{"/run", "/var/run", "/run/dbus", "/run/containerd", "/run/k3s", "/run/systemd", "/run/docker.sock", "/run/crio", "/var/lib/kubelet"}
	for _, platform := range []string{"slipway", "bottlerocket-api", "command"} {
		objs, err := ManifestObjects(ManifestOptions{Platform: platform})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			ds, ok := o.(*appsv1.DaemonSet)
			if !ok {
				continue
			}
			pod := ds.Spec.Template.Spec
			c := pod.Containers[0]
			for _, v := range pod.Volumes {
				if v.HostPath == nil {
					continue
				}
				for _, s := range sockets {
					if v.HostPath.Path == "/" || strings.HasPrefix(s+"/", strings.TrimSuffix(v.HostPath.Path, "/")+"/") {
						t.Errorf("%s: host path %s holds %s", platform, v.HostPath.Path, s)
					}
				}
				if platform == "bottlerocket-api" && v.HostPath.Path != "/run/api.sock" {
					t.Errorf("%s: host path %s beside the API socket", platform, v.HostPath.Path)
				}
			}
			for _, e := range c.Env {
				if e.Name == "DBUS_SYSTEM_BUS_ADDRESS" {
					t.Errorf("%s: the system bus named (%s)", platform, e.Value)
				}
			}
			if strings.Contains(strings.Join(c.Args, " "), "--host-run-dir") {
				t.Errorf("%s: --host-run-dir passed: %v", platform, c.Args)
			}
			sc := c.SecurityContext
			if sc == nil || sc.Privileged == nil || *sc.Privileged {
				t.Errorf("%s: the agent is privileged", platform)
			}
			if sc != nil && sc.Capabilities != nil && slices.Contains(sc.Capabilities.Add, "SYS_PTRACE") {
				t.Errorf("%s: the agent holds CAP_SYS_PTRACE", platform)
			}
			slipway := platform == "slipway"
			if pod.HostPID != slipway {
				t.Errorf("%s: hostPID %v, want %v", platform, pod.HostPID, slipway)
			}
			unconfined := sc != nil && sc.AppArmorProfile != nil && sc.AppArmorProfile.Type == corev1.AppArmorProfileTypeUnconfined
			if unconfined != slipway {
				t.Errorf("%s: AppArmor unconfined %v, want %v", platform, unconfined, slipway)
			}
			if slipway && (sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, SlipwayAgentCapabilities)) {
				t.Errorf("%s: capabilities %+v, want all dropped but %v", platform, sc.Capabilities, SlipwayAgentCapabilities)
			}
		}
	}
}

// Both components serve /metrics where their pods declare it: the agent's
// DaemonSet names the port and turns its metrics on there (the agent's
// --metrics-addr is off by default, for runs by hand on a node).
func TestManifestServesMetricsOfBoth(t *testing.T) {
	objs, err := ManifestObjects(ManifestOptions{Platform: "slipway"})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, o := range objs {
		var c corev1.Container
		switch w := o.(type) {
		case *appsv1.DaemonSet:
			c = w.Spec.Template.Spec.Containers[0]
			if args := strings.Join(c.Args, " "); !strings.Contains(args, "--metrics-addr :9480") {
				t.Errorf("the agent does not serve metrics on its port: %s", args)
			}
		case *appsv1.Deployment:
			c = w.Spec.Template.Spec.Containers[0]
		default:
			continue
		}
		seen++
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" && p.ContainerPort == 9480 }) {
			t.Errorf("%s declares no metrics port 9480: %+v", c.Name, c.Ports)
		}
	}
	if seen != 2 {
		t.Errorf("found %d workloads, want the controller and the agent", seen)
	}
}

// Each platform's manifest has its controller label only its own OS's
// nodes, so that in a cluster of k3OS and Bottlerocket nodes each agent
// DaemonSet (which selects the label) lands only on its own; an explicit
// --os-image-pattern in the controller's arguments wins.
func TestManifestLimitsTheAgentToItsPlatform(t *testing.T) {
	for _, tc := range []struct {
		platform   string
		own, other string
	}{{"bottlerocket-api", "Bottlerocket OS 1.20.0 (aws-k8s-1.31)", "k3OS v0.21.5-k3s2r1"}, {"slipway", "k3OS v0.21.5-k3s2r1", "Bottlerocket OS 1.20.0 (aws-k8s-1.31)"}} {
		objs, err := ManifestObjects(ManifestOptions{Platform: tc.platform})
		if err != nil {
			t.Fatal(err)
		}
		var args []string
		for _, o := range objs {
			if d, ok := o.(*appsv1.Deployment); ok {
				args = d.Spec.Template.Spec.Containers[0].Args
			}
		}
		i := slices.Index(args, "--os-image-pattern")
		if i < 0 {
			t.Fatalf("%s: the controller has no --os-image-pattern: %q", tc.platform, args)
		}
		re := regexp.MustCompile(args[i+1])
		if !re.MatchString(tc.own) || re.MatchString(tc.other) {
			t.Errorf("%s: --os-image-pattern %q: matches its own OS %v (want true), the other's %v (want false)", tc.platform, args[i+1], re.MatchString(tc.own), re.MatchString(tc.other))
		}
	}
	objs, _ := ManifestObjects(ManifestOptions{Platform: "slipway", ControllerArgs: []string{"--os-image-pattern=^mine"}})
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			if args := d.Spec.Template.Spec.Containers[0].Args; slices.Contains(args, "--os-image-pattern") {
				t.Errorf("the pattern given was doubled: %q", args)
			}
		}
	}
}

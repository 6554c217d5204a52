package oldkube

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"slipway.dev/slipway/ops/agent"
	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/webhook"
)

const ns = "slipway-old"

// opts is the manifest the tests install: the webhook isolation.
var opts = manifest.Options{Namespace: ns, Isolation: manifest.IsolationWebhook,
	ReleaseSources: []string{"github-releases://rancher/k3os"}}

// TestServerIsOld guards what every other test here assumes.
func TestServerIsOld(t *testing.T) {
	e := testenv.Need(t, env)
	v, err := kubernetes.NewForConfigOrDie(e.Config).Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != testenv.OldKubeVersion {
		t.Fatalf("the API server runs %s, want %s", v.GitVersion, testenv.OldKubeVersion)
	}
	// What the policy isolation needs is missing there.
	_, err = kubernetes.NewForConfigOrDie(e.Config).AdmissionregistrationV1().ValidatingAdmissionPolicies().List(context.Background(), metav1.ListOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("listing ValidatingAdmissionPolicies on %s: %v, want NotFound (the API does not exist there)", v.GitVersion, err)
	}
}

// serveInProcess serves the policies of o from this test process on
// loopback and returns its address and CA. It reads pods as the admin
// until the test gives it another client (webhookServer.as).
func serveInProcess(t *testing.T, cfg *rest.Config, o manifest.Options) (addr string, ca []byte) {
	addr, ca, _ = serveAs(t, cfg, o)
	return addr, ca
}

// serveAs is serveInProcess, also returning the function that makes the
// webhook read pods with another client config.
func serveAs(t *testing.T, cfg *rest.Config, o manifest.Options) (addr string, ca []byte, as func(*rest.Config)) {
	t.Helper()
	var client atomic.Pointer[kubernetes.Clientset]
	client.Store(kubernetes.NewForConfigOrDie(cfg))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ca, cert, err := webhook.SelfSigned([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := webhook.New(manifest.Policies(o), func(ctx context.Context, ns, name string) (*corev1.Pod, error) {
		return client.Load().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- webhook.Serve(sctx, l, cert, srv) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("webhook: %v", err)
		}
	})
	return l.Addr().String(), ca, func(c *rest.Config) { client.Store(kubernetes.NewForConfigOrDie(c)) }
}

// install creates the webhook isolation's manifest of o (what k3s's deploy
// controller would apply, by create, as it does), with the webhook
// configuration pointed at https://addr instead of the slipway-admission
// Service; ca, when given, is written as its CA bundle (else the webhook
// writes it). It returns the admission Deployment's container, and removes
// the configuration at the end of the test (it fails closed).
func install(ctx context.Context, t *testing.T, cfg *rest.Config, o manifest.Options, addr string, ca []byte) corev1.Container {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(cfg)
	objs, err := manifest.Objects(o)
	if err != nil {
		t.Fatal(err)
	}
	var admissionPod *corev1.Container
	var sawConfig bool
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *corev1.Namespace:
			_, err = cs.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Service:
			_, err = cs.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.DaemonSet:
			_, err = cs.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.Deployment:
			if o.Name == manifest.AdmissionName {
				admissionPod = &o.Spec.Template.Spec.Containers[0]
			}
			_, err = cs.AppsV1().Deployments(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingWebhookConfiguration:
			sawConfig = true
			for i := range o.Webhooks {
				path := *o.Webhooks[i].ClientConfig.Service.Path
				o.Webhooks[i].ClientConfig = admissionv1.WebhookClientConfig{URL: ptr.To("https://" + addr + path)}
			}
			for i := range o.Webhooks {
				o.Webhooks[i].ClientConfig.CABundle = ca // in the object the server first sees: no call without it
			}
			_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, o, metav1.CreateOptions{})
			name := o.Name
			t.Cleanup(func() {
				_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
			})
		case *admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding:
			t.Fatalf("the webhook isolation's manifest carries %T, which this server lacks", o)
		default:
			continue // the CRDs (installed by the Env), the PriorityClass, the channel
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %T: %v", obj, err)
		}
	}
	if !sawConfig || admissionPod == nil {
		t.Fatalf("the webhook isolation's manifest lacks the webhook configuration (%v) or its Deployment (%v)", sawConfig, admissionPod != nil)
	}
	if ca != nil {
		inForce(ctx, t, cfg, o.WithDefaults().Namespace)
	}
	return *admissionPod
}

// inForce waits until the API server calls the webhook of namespace ns's
// configuration: its admission configuration is read from a cache that
// follows the objects a moment later, so a write just after the
// configuration was created may pass unchecked, or meet an older version
// of it. The probe is a dry-run Lease of another node written as the
// agent's ServiceAccount, which only the webhook refuses.
func inForce(ctx context.Context, t *testing.T, admin *rest.Config, ns string) {
	t.Helper()
	as := rest.CopyConfig(admin)
	as.Impersonate = rest.ImpersonationConfig{UserName: manifest.AgentUser(ns), Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	cs := kubernetes.NewForConfigOrDie(as)
	probe := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: manifest.HeartbeatLeasePrefix + "in-force-probe", Namespace: ns}}
	for {
		_, err := cs.CoordinationV1().Leases(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "served by slipway's webhook") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the webhook of %s is not called: the probe got %v", ns, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// agentOn creates a pod of the agent's ServiceAccount bound to node, and
// returns a client with the token its kubelet would mount.
func agentOn(ctx context.Context, t *testing.T, admin *rest.Config, node, pod string) *kubernetes.Clientset {
	return agentIn(ctx, t, admin, ns, node, pod)
}

func agentIn(ctx context.Context, t *testing.T, admin *rest.Config, ns, node, pod string) *kubernetes.Clientset {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(admin)
	_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: manifest.AgentName,
			Containers: []corev1.Container{{Name: "agent", Image: "slipway"}}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg, err := testenv.PodToken(ctx, admin, ns, pod)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

func node(ctx context.Context, t *testing.T, cs *kubernetes.Clientset, name string) {
	t.Helper()
	_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func labelPatch(key string) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{key: "x"}}})
	return b
}

// denied fails unless err is the webhook's refusal (not RBAC's, not a failure to call it).
func denied(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: admitted, want the webhook to refuse it", what)
		return
	}
	if !strings.Contains(err.Error(), "served by slipway's webhook") || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v, want slipway's webhook to refuse it with %q", what, err, want)
	}
}

func allowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want it admitted", what, err)
	}
}

// TestWebhookConfinesTheAgentToItsNode attacks with an agent's real bound
// token on the old server: the API server (through the webhook it calls,
// failing closed) refuses another node's Node, Lease and Job, and a token
// bound to no pod, and admits the agent's own.
func TestWebhookConfinesTheAgentToItsNode(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr, ca, as := serveAs(t, e.Config, opts)
	install(ctx, t, e.Config, opts, addr, ca)
	admin := kubernetes.NewForConfigOrDie(e.Config)
	// Names of this run's own: -count=N reuses the control plane.
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	na, nb, pa := "old-a-"+run, "old-b-"+run, "agent-a-"+run
	// The webhook reads pods with its own ServiceAccount's token, as in its Deployment.
	_, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "admission-" + run, Namespace: ns},
		Spec: corev1.PodSpec{ServiceAccountName: manifest.AdmissionName, Containers: []corev1.Container{{Name: "admission", Image: "slipway"}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own, err := testenv.PodToken(ctx, e.Config, ns, "admission-"+run)
	if err != nil {
		t.Fatal(err)
	}
	as(own)
	node(ctx, t, admin, na)
	node(ctx, t, admin, nb)
	a := agentOn(ctx, t, e.Config, na, pa)

	_, err = a.CoreV1().Nodes().Patch(ctx, na, types.MergePatchType, labelPatch("ops.slipway.dev/test"), metav1.PatchOptions{})
	allowed(t, "agent on old-a labels its own Node", err)
	_, err = a.CoreV1().Nodes().Patch(ctx, nb, types.MergePatchType, labelPatch("ops.slipway.dev/test"), metav1.PatchOptions{})
	denied(t, "agent on old-a labels old-b", err, "own")
	_, err = a.CoreV1().Nodes().Patch(ctx, na, types.MergePatchType, labelPatch("example.com/other"), metav1.PatchOptions{})
	denied(t, "agent on old-a writes a foreign label on its own Node", err, "ops.slipway.dev/")

	lease := func(n string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: manifest.HeartbeatLeasePrefix + n, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n)}}
	}
	_, err = a.CoordinationV1().Leases(ns).Create(ctx, lease(na), metav1.CreateOptions{})
	allowed(t, "agent on old-a writes its heartbeat Lease", err)
	_, err = a.CoordinationV1().Leases(ns).Create(ctx, lease(nb), metav1.CreateOptions{})
	denied(t, "agent on old-a writes old-b's heartbeat Lease", err, "own node's heartbeat")

	// The agent's own Jobs of every kind, from its Job builder under the
	// webhook isolation, as it creates them: the 1.23 server drops their
	// appArmorProfile field and keeps the beta annotation.
	ch := &opsv1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "c-" + run, Namespace: ns, UID: types.UID("uid-" + run)},
		Spec: opsv1.UpdateChannelSpec{URL: "github-releases://rancher/k3os", Version: "v2"}}
	jobs, err := agent.Jobs(agent.Options{NodeName: na, Image: manifest.DefaultImage(), Namespace: ns, Isolation: process.IsolationWebhook}, ch,
		opsv1.Slot{Node: na, Version: "v2", Attempt: 1, Since: metav1.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for kind, j := range jobs {
		j = j.DeepCopy()
		if kind == agent.JobActivate {
			j.Name += "-activate" // the upgrade Job's name: the agent creates one or the other for a slot
		}
		got, err := a.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{})
		allowed(t, "agent on old-a creates its own "+kind+" Job", err)
		if err != nil {
			continue
		}
		c := got.Spec.Template.Spec.Containers[0]
		if v := got.Spec.Template.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name]; v != corev1.DeprecatedAppArmorBetaProfileNameUnconfined {
			t.Errorf("the %s Job as stored: AppArmor annotation %q, want %q", kind, v, corev1.DeprecatedAppArmorBetaProfileNameUnconfined)
		}
	}
	upgrade := func(name string, mutate func(*batchv1.Job)) *batchv1.Job {
		j := jobs[agent.JobUpgrade].DeepCopy()
		j.Name = name
		mutate(j)
		return j
	}
	_, err = a.BatchV1().Jobs(ns).Create(ctx, upgrade(jobs[agent.JobUpgrade].Name+"-b", func(j *batchv1.Job) { j.Spec.Template.Spec.NodeName = nb }),
		metav1.CreateOptions{})
	denied(t, "agent on old-a creates a Job pinned to old-b", err, "pinned")
	_, err = a.BatchV1().Jobs(ns).Create(ctx, upgrade(jobs[agent.JobUpgrade].Name+"-pid", func(j *batchv1.Job) { j.Spec.Template.Spec.HostPID = true }),
		metav1.CreateOptions{})
	denied(t, "agent on old-a creates a host-PID Job", err, "host")
	_, err = a.BatchV1().Jobs(ns).Create(ctx, upgrade(jobs[agent.JobUpgrade].Name+"-aa", func(j *batchv1.Job) {
		j.Spec.Template.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+"upgrade"] = "localhost/other"
	}), metav1.CreateOptions{})
	denied(t, "agent on old-a creates a Job with another AppArmor profile", err, "AppArmor")

	// A token of the agent's ServiceAccount bound to no pod names no node.
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, manifest.AgentName, &authTokenRequest, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unbound := kubernetes.NewForConfigOrDie(&rest.Config{Host: e.Config.Host, BearerToken: tr.Status.Token, TLSClientConfig: e.Config.TLSClientConfig})
	_, err = unbound.CoreV1().Nodes().Patch(ctx, na, types.MergePatchType, labelPatch("ops.slipway.dev/test2"), metav1.PatchOptions{})
	denied(t, "an unbound agent token labels a Node", err, "own")

	// A pod moved to another node is another pod: the token dies with its pod.
	if err := admin.CoreV1().Pods(ns).Delete(ctx, pa, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, admin, pa)
	_, err = admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pa, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: nb, ServiceAccountName: manifest.AgentName,
			Containers: []corev1.Container{{Name: "agent", Image: "slipway"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.CoreV1().Nodes().Patch(ctx, nb, types.MergePatchType, labelPatch("ops.slipway.dev/test"), metav1.PatchOptions{})
	if err == nil {
		t.Errorf("the old pod's token wrote old-b through the new pod of the same name")
	}

	// Another component's pod, in a namespace whose pods the webhook may not
	// read, writing Nodes as its RBAC allows: not held up by the webhook.
	other := "other-" + run
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(other).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "writer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "node-writer-" + run},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}}}}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "writer", Namespace: other}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = admin.RbacV1().ClusterRoleBindings().Delete(bg, binding.Name, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(bg, role.Name, metav1.DeleteOptions{})
	})
	if _, err := admin.CoreV1().Pods(other).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "writer", Namespace: other},
		Spec: corev1.PodSpec{NodeName: nb, ServiceAccountName: "writer", Containers: []corev1.Container{{Name: "w", Image: "w"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wcfg, err := testenv.PodToken(ctx, e.Config, other, "writer")
	if err != nil {
		t.Fatal(err)
	}
	_, err = kubernetes.NewForConfigOrDie(wcfg).CoreV1().Nodes().Patch(ctx, na, types.MergePatchType, labelPatch("example.com/other"), metav1.PatchOptions{})
	allowed(t, "another namespace's pod writes a Node as its RBAC allows", err)
}

func waitGone(ctx context.Context, t *testing.T, cs *kubernetes.Clientset, pod string) {
	t.Helper()
	for {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s not gone: %v", pod, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var authTokenRequest = authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}

package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"slipway.dev/slipway/ops/agent"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/process"
)

// podAsNewServer is p as an API server 1.30+ sends it.
func podAsNewServer(t *testing.T, p *corev1.Pod) runtime.RawExtension {
	t.Helper()
	p = p.DeepCopy()
	p.APIVersion, p.Kind = "v1", "Pod"
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: raw}
}

// podAsOldServer is p as an API server before 1.30 stores and sends it:
// the containers' securityContext.appArmorProfile dropped.
func podAsOldServer(t *testing.T, p *corev1.Pod) runtime.RawExtension {
	t.Helper()
	return withoutAppArmorField(t, podAsNewServer(t, p), "spec")
}

// slotPods are the agent's slot Pods on node, built under isolation iso.
func slotPods(t *testing.T, ns, node, iso string) map[string]*corev1.Pod {
	t.Helper()
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns, UID: "uid-1"},
		Spec: v1.UpdateChannelSpec{URL: "github-releases://rancher/k3os", Version: "v2"}}
	pods, err := agent.SlotPods(agent.Options{NodeName: node, Image: manifest.DefaultImage(), Namespace: ns, Isolation: iso}, ch,
		v1.Slot{Node: node, Version: "v2", Attempt: 1, Since: metav1.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

// podReview is how the webhook of o answers a write (op) of a Pod by the
// agent on node: obj the Pod written (CREATE), old the Pod deleted (DELETE).
func podReview(t *testing.T, o manifest.Options, policy, node string, op admissionv1.Operation, obj, old runtime.RawExtension) *admissionv1.AdmissionResponse {
	t.Helper()
	s, err := New(manifest.Policies(o), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := s.policies[policy]
	if p == nil {
		t.Fatalf("no policy %s", policy)
	}
	return s.Review(context.Background(), p, &admissionv1.AdmissionRequest{UID: "r", Operation: op, Namespace: o.Namespace,
		Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		UserInfo: authenticationv1.UserInfo{Username: manifest.AgentUser(o.Namespace), Extra: map[string]authenticationv1.ExtraValue{NodeNameExtra: {node}}},
		Object:   obj, OldObject: old})
}

// TestWebhookIsolationAdmitsTheAgentsSlotPodsOnAnOldServer: under the
// webhook isolation the agent's slot Pods of every kind, built by its own
// builder, are admitted as a server before 1.30 sends them (no
// appArmorProfile field; the beta annotation instead) and as 1.30+ sends
// them (both); AppArmor asked for in any other way, another node's
// binding, an owner, or any other annotation, is refused.
func TestWebhookIsolationAdmitsTheAgentsSlotPodsOnAnOldServer(t *testing.T) {
	const ns, node = "ns", "n1"
	o := manifest.Options{Namespace: ns, Isolation: manifest.IsolationWebhook}
	policy := manifest.AgentName + "-slot-pods-" + ns
	review := func(obj runtime.RawExtension) *admissionv1.AdmissionResponse {
		return podReview(t, o, policy, node, admissionv1.Create, obj, runtime.RawExtension{})
	}
	pods := slotPods(t, ns, node, process.IsolationWebhook)
	for kind, p := range pods {
		name := p.Spec.Containers[0].Name
		if got := p.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+name]; got != "unconfined" {
			t.Errorf("the %s Pod carries AppArmor annotation %q for its container %s, want unconfined", kind, got, name)
		}
		if r := review(podAsOldServer(t, p)); !r.Allowed {
			t.Errorf("the agent's %s Pod as a 1.23 server sends it: refused: %s", kind, r.Result.Message)
		}
		if r := review(podAsNewServer(t, p)); !r.Allowed {
			t.Errorf("the agent's %s Pod as a 1.30 server sends it: refused: %s", kind, r.Result.Message)
		}
	}
	key := corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "upgrade"
	for name, c := range map[string]struct {
		mutate func(*corev1.Pod)
		want   string
	}{
		"another AppArmor profile": {func(p *corev1.Pod) { p.Annotations[key] = "localhost/custom" }, "AppArmor"},
		"the runtime's profile":    {func(p *corev1.Pod) { p.Annotations[key] = "runtime/default" }, "AppArmor"},
		"no AppArmor at all":       {func(p *corev1.Pod) { delete(p.Annotations, key) }, "AppArmor"},
		"another container's key": {func(p *corev1.Pod) {
			p.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+"other"] = "unconfined"
		}, "annotations under ops.slipway.dev/"},
		"seccomp off by the alpha annotation": {func(p *corev1.Pod) {
			p.Annotations["seccomp.security.alpha.kubernetes.io/pod"] = "unconfined"
		}, "annotations under ops.slipway.dev/"},
		"bound to another node": {func(p *corev1.Pod) { p.Spec.NodeName = "n2" }, "pinned (spec.nodeName)"},
		"owned by another node's Job": {func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "upgrade-2-n2-x", UID: "u"}}
		}, "no owner"},
	} {
		t.Run(name, func(t *testing.T) {
			p := pods[agent.PodUpgrade].DeepCopy()
			c.mutate(p)
			r := review(podAsOldServer(t, p))
			if r.Allowed || !strings.Contains(r.Result.Message, c.want) || !strings.Contains(r.Result.Message, "slot Pods") {
				t.Errorf("admitted or refused for another reason (%+v), want refused with %q", r.Result, c.want)
			}
		})
	}
}

// TestPolicyIsolationAdmitsTheSlotPodsAppArmorAnnotation: the policy
// isolation (1.30+) admits the agent's slot Pods with the field, and with
// the annotation beside it too (a server may add it to a Pod that has the
// field), only unconfined.
func TestPolicyIsolationAdmitsTheSlotPodsAppArmorAnnotation(t *testing.T) {
	const ns, node = "ns", "n1"
	o := manifest.Options{Namespace: ns}
	policy := manifest.AgentName + "-slot-pods-" + ns
	for _, iso := range []string{process.IsolationPolicy, process.IsolationWebhook} {
		p := slotPods(t, ns, node, iso)[agent.PodUpgrade]
		if r := podReview(t, o, policy, node, admissionv1.Create, podAsNewServer(t, p), runtime.RawExtension{}); !r.Allowed {
			t.Errorf("the agent's slot Pod built under the %s isolation: refused (%+v)", iso, r.Result)
		}
		p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "upgrade": "localhost/custom"}
		if r := podReview(t, o, policy, node, admissionv1.Create, podAsNewServer(t, p), runtime.RawExtension{}); r.Allowed {
			t.Errorf("a slot Pod with the annotation of another AppArmor profile built under the %s isolation: admitted", iso)
		}
	}
}

// TestWebhookIsolationDeletesOnlyTheAgentsOwnSlotPods: under the webhook
// isolation the agent deletes its own node's slot Pods, and no other pod.
func TestWebhookIsolationDeletesOnlyTheAgentsOwnSlotPods(t *testing.T) {
	const ns, node = "ns", "n1"
	o := manifest.Options{Namespace: ns, Isolation: manifest.IsolationWebhook}
	policy := manifest.AgentName + "-slot-pod-deletes-" + ns
	own := slotPods(t, ns, node, process.IsolationWebhook)[agent.PodUpgrade]
	if r := podReview(t, o, policy, node, admissionv1.Delete, runtime.RawExtension{}, podAsOldServer(t, own)); !r.Allowed {
		t.Errorf("the agent's own slot Pod: its delete refused (%+v)", r.Result)
	}
	theirs := slotPods(t, ns, "n2", process.IsolationWebhook)[agent.PodUpgrade]
	owned := own.DeepCopy()
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: own.Name, UID: "u"}}
	unlabelled := own.DeepCopy()
	unlabelled.Labels = nil
	for what, p := range map[string]*corev1.Pod{"another node's slot Pod": theirs, "a Job's pod": owned, "a pod without the upgrade label": unlabelled} {
		r := podReview(t, o, policy, node, admissionv1.Delete, runtime.RawExtension{}, podAsOldServer(t, p))
		if r.Allowed || !strings.Contains(r.Result.Message, "delete only its own node's slot Pods") {
			t.Errorf("the delete of %s: admitted or refused for another reason (%+v)", what, r.Result)
		}
	}
}

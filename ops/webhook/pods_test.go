package webhook

import (
	"context"
	"encoding/json"
	"slices"
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

// TestWebhookIsolationLeavesPodsAlone: under the webhook isolation a
// slot's work stays a Job (manifest.Options.SlotPods): the webhook holds
// no policy on pods, so it never stands between slipway's namespace and
// its own replacement pod, and the agent may create and delete no pod.
func TestWebhookIsolationLeavesPodsAlone(t *testing.T) {
	o := manifest.Options{Namespace: "ns", Isolation: manifest.IsolationWebhook}
	s, err := New(manifest.Policies(o), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name := range s.policies {
		if strings.Contains(name, "pod") {
			t.Errorf("policy %s under the webhook isolation", name)
		}
	}
	_, namespaced := manifest.Rules(o)
	for _, r := range namespaced {
		if slices.Contains(r.Resources, "pods") && (slices.Contains(r.Verbs, "create") || slices.Contains(r.Verbs, "delete")) {
			t.Errorf("the agent may %v pods under the webhook isolation", r.Verbs)
		}
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

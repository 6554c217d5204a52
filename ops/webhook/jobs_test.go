package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"slipway.dev/slipway/ops/agent"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/process"
)

// asOldServer is j as an API server before 1.30 stores and sends it: the
// containers' securityContext.appArmorProfile dropped (unknown there).
func asOldServer(t *testing.T, j *batchv1.Job) runtime.RawExtension {
	t.Helper()
	return withoutAppArmorField(t, asNewServer(t, j), "spec", "template", "spec")
}

// withoutAppArmorField is raw with the securityContext.appArmorProfile of
// the containers of the pod spec at path dropped.
func withoutAppArmorField(t *testing.T, raw runtime.RawExtension, path ...string) runtime.RawExtension {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal(raw.Raw, &obj); err != nil {
		t.Fatal(err)
	}
	spec := obj
	for _, k := range path {
		spec = spec[k].(map[string]any)
	}
	containers, _ := spec["containers"].([]any)
	for _, c := range containers {
		if sc, ok := c.(map[string]any)["securityContext"].(map[string]any); ok {
			delete(sc, "appArmorProfile")
		}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: b}
}

// asNewServer is j as an API server 1.30+ sends it.
func asNewServer(t *testing.T, j *batchv1.Job) runtime.RawExtension {
	t.Helper()
	j = j.DeepCopy()
	j.APIVersion, j.Kind = "batch/v1", "Job"
	raw, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: raw}
}

// TestWebhookIsolationAdmitsTheAgentsJobsOnAnOldServer: under the webhook
// isolation the agent's Jobs of every kind, built by its own Job builder,
// are admitted as a server before 1.30 sends them (no appArmorProfile
// field; the beta annotation instead) and as 1.30+ sends them (both);
// AppArmor asked for in any other way, or any other annotation, is
// refused.
func TestWebhookIsolationAdmitsTheAgentsJobsOnAnOldServer(t *testing.T) {
	const ns, node = "ns", "n1"
	o := manifest.Options{Namespace: ns, Isolation: manifest.IsolationWebhook}
	s, err := New(manifest.Policies(o), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := s.policies[manifest.AgentName+"-jobs-"+ns]
	if p == nil {
		t.Fatal("no Job policy")
	}
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns, UID: "uid-1"},
		Spec: v1.UpdateChannelSpec{URL: "github-releases://rancher/k3os", Version: "v2"}}
	jobs, err := agent.Jobs(agent.Options{NodeName: node, Image: manifest.DefaultImage(), Namespace: ns, Isolation: process.IsolationWebhook}, ch,
		v1.Slot{Node: node, Version: "v2", Attempt: 1, Since: metav1.Now()})
	if err != nil {
		t.Fatal(err)
	}
	review := func(obj runtime.RawExtension) *admissionv1.AdmissionResponse {
		return s.Review(context.Background(), p, &admissionv1.AdmissionRequest{UID: "r", Operation: admissionv1.Create, Namespace: ns,
			Kind:     metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"},
			Resource: metav1.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"},
			UserInfo: authenticationv1.UserInfo{Username: manifest.AgentUser(ns), Extra: map[string]authenticationv1.ExtraValue{NodeNameExtra: {node}}},
			Object:   obj})
	}
	for kind, j := range jobs {
		name := j.Spec.Template.Spec.Containers[0].Name
		if got := j.Spec.Template.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+name]; got != "unconfined" {
			t.Errorf("the %s Job's pod carries AppArmor annotation %q for its container %s, want unconfined", kind, got, name)
		}
		if _, ok := j.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+name]; ok {
			t.Errorf("the %s Job itself carries the pod's AppArmor annotation", kind)
		}
		if r := review(asOldServer(t, j)); !r.Allowed {
			t.Errorf("the agent's %s Job as a 1.23 server sends it: refused: %s", kind, r.Result.Message)
		}
		if r := review(asNewServer(t, j)); !r.Allowed {
			t.Errorf("the agent's %s Job as a 1.30 server sends it: refused: %s", kind, r.Result.Message)
		}
	}
	key := corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "upgrade"
	for name, c := range map[string]struct {
		mutate func(*batchv1.Job)
		want   string
	}{
		"another AppArmor profile": {func(j *batchv1.Job) { j.Spec.Template.Annotations[key] = "localhost/custom" }, "AppArmor"},
		"the runtime's profile":    {func(j *batchv1.Job) { j.Spec.Template.Annotations[key] = "runtime/default" }, "AppArmor"},
		"no AppArmor at all":       {func(j *batchv1.Job) { delete(j.Spec.Template.Annotations, key) }, "AppArmor"},
		"another container's key": {func(j *batchv1.Job) {
			j.Spec.Template.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+"other"] = "unconfined"
		}, "annotations under ops.slipway.dev/"},
		"seccomp off by the alpha annotation": {func(j *batchv1.Job) {
			j.Spec.Template.Annotations["seccomp.security.alpha.kubernetes.io/pod"] = "unconfined"
		}, "annotations under ops.slipway.dev/"},
		"the AppArmor annotation on the Job": {func(j *batchv1.Job) {
			j.Annotations = map[string]string{key: "unconfined"}
			for k, v := range j.Spec.Template.Annotations {
				if k != key {
					j.Annotations[k] = v
				}
			}
		}, "annotations under ops.slipway.dev/"},
	} {
		t.Run(name, func(t *testing.T) {
			j := jobs[agent.JobUpgrade].DeepCopy()
			c.mutate(j)
			r := review(asOldServer(t, j))
			if r.Allowed || !strings.Contains(r.Result.Message, c.want) {
				t.Errorf("admitted or refused for another reason (%+v), want refused with %q", r.Result, c.want)
			}
		})
	}
}

// TestPolicyIsolationKeepsAppArmorToTheField: the policy isolation (1.30+)
// admits the agent's Jobs only with the field, and no annotation.
func TestPolicyIsolationKeepsAppArmorToTheField(t *testing.T) {
	const ns, node = "ns", "n1"
	s, err := New(manifest.Policies(manifest.Options{Namespace: ns}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := s.policies[manifest.AgentName+"-jobs-"+ns]
	ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns, UID: "uid-1"},
		Spec: v1.UpdateChannelSpec{URL: "github-releases://rancher/k3os", Version: "v2"}}
	for _, iso := range []string{process.IsolationPolicy, process.IsolationWebhook} {
		j, err := agent.UpgradeJob(agent.Options{NodeName: node, Image: manifest.DefaultImage(), Namespace: ns, Isolation: iso}, ch,
			v1.Slot{Node: node, Version: "v2", Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		r := s.Review(context.Background(), p, &admissionv1.AdmissionRequest{UID: "r", Operation: admissionv1.Create, Namespace: ns,
			Kind:     metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"},
			Resource: metav1.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"},
			UserInfo: authenticationv1.UserInfo{Username: manifest.AgentUser(ns), Extra: map[string]authenticationv1.ExtraValue{NodeNameExtra: {node}}},
			Object:   asNewServer(t, j)})
		if want := iso == process.IsolationPolicy; r.Allowed != want {
			t.Errorf("the agent's Job built under the %s isolation: admitted %v, want %v (%+v)", iso, r.Allowed, want, r.Result)
		}
	}
}

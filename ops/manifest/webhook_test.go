package manifest

import (
	"maps"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"slipway.dev/slipway/ops/process"
)

// TestWebhookIsolation: the webhook isolation replaces every policy by one
// webhook entry with its rules, failing closed, and tells the agent and the
// controller (only them) which isolation holds them.
func TestWebhookIsolation(t *testing.T) {
	o := Options{Namespace: "ns", Isolation: IsolationWebhook}
	objs, err := Objects(o)
	if err != nil {
		t.Fatal(err)
	}
	policies := Policies(o)
	var cfg *admissionv1.ValidatingWebhookConfiguration
	env := map[string]bool{}
	for _, obj := range objs {
		switch v := obj.(type) {
		case *admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding:
			t.Errorf("the webhook isolation installs %T", v)
		case *admissionv1.ValidatingWebhookConfiguration:
			cfg = v
		case *appsv1.DaemonSet:
			env[v.Name] = hasIsolationEnv(v.Spec.Template.Spec.Containers)
			if v.Spec.Template.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+"agent"] != "unconfined" {
				t.Errorf("the agent's pod lacks the AppArmor annotation older servers read: %v", v.Spec.Template.Annotations)
			}
		case *appsv1.Deployment:
			env[v.Name] = hasIsolationEnv(v.Spec.Template.Spec.Containers)
		}
	}
	if want := map[string]bool{AgentName: true, ControllerName: true, AdmissionName: false}; !maps.Equal(env, want) {
		t.Errorf("%s in the workloads: %v, want %v", IsolationEnv, env, want)
	}
	if cfg == nil || len(cfg.Webhooks) != len(policies) || len(policies) == 0 {
		t.Fatalf("webhook configuration %+v for %d policies", cfg, len(policies))
	}
	for i, w := range cfg.Webhooks {
		p := policies[i]
		if w.Name != p.Name+WebhookSuffix || *w.ClientConfig.Service.Path != WebhookPath(p.Name) || *w.FailurePolicy != admissionv1.Fail ||
			len(w.Rules) != len(p.Spec.MatchConstraints.ResourceRules) {
			t.Errorf("webhook %d %+v does not stand for policy %s", i, w, p.Name)
		}
	}
	if _, err := Objects(Options{Isolation: "vap"}); err == nil || !strings.Contains(err.Error(), IsolationWebhook) {
		t.Errorf("an unknown isolation: %v, want an error naming the choices", err)
	}
	def, err := Objects(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range def {
		if _, ok := obj.(*admissionv1.ValidatingWebhookConfiguration); ok {
			t.Error("the default manifest carries the webhook")
		}
	}
}

func hasIsolationEnv(cs []corev1.Container) bool {
	for _, e := range cs[0].Env {
		if e.Name == IsolationEnv && e.Value == IsolationWebhook {
			return true
		}
	}
	return false
}

// TestIsolationNamesMatchProcess: the manifest writes what ops/process reads.
func TestIsolationNamesMatchProcess(t *testing.T) {
	if IsolationEnv != process.IsolationEnv || IsolationWebhook != process.IsolationWebhook || IsolationPolicy != process.IsolationPolicy {
		t.Errorf("manifest %s=%s|%s, process %s=%s|%s", IsolationEnv, IsolationPolicy, IsolationWebhook,
			process.IsolationEnv, process.IsolationPolicy, process.IsolationWebhook)
	}
}

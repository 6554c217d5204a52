package manifest

import (
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The isolation of API servers older than 1.30 (the last k3os releases
// carry k3s 1.22 and 1.23): they have no ValidatingAdmissionPolicy v1 and
// put no node name in a bound token, so the manifest confines the agent
// and the controller by slipway's admission webhook instead
// (Options.Isolation = IsolationWebhook, `slipway ops manifest
// --isolation=webhook`). The webhook (`slipway ops webhook`, the same
// binary, run by the slipway-admission Deployment) evaluates the very policies the policy
// isolation installs, one webhook entry per policy, so what is refused is
// the same on both; docs/agent/old-kubernetes.md says which confinements
// hold on an old server and which do not.

// Isolation modes (Options.Isolation); the agent and the controller read
// the mode from the environment variable IsolationEnv.
const (
	IsolationPolicy  = "policy"
	IsolationWebhook = "webhook"
	IsolationEnv     = "SLIPWAY_ISOLATION" // ops/process's IsolationEnv
)

// AdmissionName names the webhook's Deployment, Service, ServiceAccount,
// RBAC objects and ValidatingWebhookConfiguration.
const AdmissionName = "slipway-admission"

// AdmissionPort is the port the webhook serves HTTPS on.
const AdmissionPort = 9443

// WebhookSuffix makes a policy's name the name of its webhook entry (a
// webhook's name must be a qualified domain name).
const WebhookSuffix = ".admission.slipway.dev"

// WebhookPath is where the webhook answers for a policy (ops/webhook's PathPrefix + name).
func WebhookPath(policy string) string { return "/validate/" + policy }

// Policies are the ValidatingAdmissionPolicies of the policy isolation: what
// the webhook evaluates in the webhook isolation.
func Policies(o Options) []*admissionv1.ValidatingAdmissionPolicy {
	o = o.WithDefaults()
	var out []*admissionv1.ValidatingAdmissionPolicy
	for _, obj := range policies(o) {
		if p, ok := obj.(*admissionv1.ValidatingAdmissionPolicy); ok {
			out = append(out, p)
		}
	}
	return out
}

// WebhookConfiguration sends every write a policy of Policies(o) matches
// to the webhook: one entry per policy, its rules and namespace selector,
// failing closed. client gives each entry's clientConfig from its path (the
// manifest: the slipway-admission Service, whose CA bundle the webhook
// writes at start; a test: a URL).
func WebhookConfiguration(o Options, client func(path string) admissionv1.WebhookClientConfig) *admissionv1.ValidatingWebhookConfiguration {
	o = o.WithDefaults()
	fail, none, equivalent := admissionv1.Fail, admissionv1.SideEffectClassNone, admissionv1.Equivalent
	cfg := &admissionv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionWebhookConfigName(o.Namespace), Labels: labels("admission")},
	}
	for _, p := range Policies(o) {
		var rules []admissionv1.RuleWithOperations
		var nsSel *metav1.LabelSelector
		if mc := p.Spec.MatchConstraints; mc != nil {
			for _, r := range mc.ResourceRules {
				rules = append(rules, r.RuleWithOperations)
			}
			nsSel = mc.NamespaceSelector
		}
		cfg.Webhooks = append(cfg.Webhooks, admissionv1.ValidatingWebhook{
			Name:                    p.Name + WebhookSuffix,
			ClientConfig:            client(WebhookPath(p.Name)),
			Rules:                   rules,
			NamespaceSelector:       nsSel,
			FailurePolicy:           &fail,
			MatchPolicy:             &equivalent,
			SideEffects:             &none,
			TimeoutSeconds:          ptr.To[int32](10),
			AdmissionReviewVersions: []string{"v1"},
		})
	}
	return cfg
}

// AdmissionWebhookConfigName names the ValidatingWebhookConfiguration of namespace's slipway.
func AdmissionWebhookConfigName(namespace string) string { return AdmissionName + "-" + namespace }

// admissionServiceHost is the webhook Service's DNS name (its serving certificate names it).
func admissionServiceHost(o Options) string { return AdmissionName + "." + o.Namespace + ".svc" }

// webhookObjects replace the policies in the webhook isolation: the
// webhook's Deployment, Service, RBAC and configuration.
func webhookObjects(o Options) []any {
	cfg := WebhookConfiguration(o, func(path string) admissionv1.WebhookClientConfig {
		return admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{
			Namespace: o.Namespace, Name: AdmissionName, Path: ptr.To(path), Port: ptr.To[int32](AdmissionPort)}}
	})
	lbl := labels("admission")
	lbl["app.kubernetes.io/name"] = AdmissionName
	selector := map[string]string{"app.kubernetes.io/name": AdmissionName}
	// The pods a token is bound to (to learn its node), and the CA bundle of
	// its own configuration, nothing else.
	objs := roleObjects(AdmissionName, o.Namespace, lbl,
		[]rbacv1.PolicyRule{{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"},
			Verbs: []string{"get", "update"}, ResourceNames: []string{cfg.Name}}},
		[]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}})
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionName, Namespace: o.Namespace, Labels: lbl},
		Spec: corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{
			{Name: "https", Port: AdmissionPort, TargetPort: intstr.FromString("https"), Protocol: corev1.ProtocolTCP}}},
	}
	dep := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionName, Namespace: o.Namespace, Labels: lbl},
		Spec: appsv1.DeploymentSpec{
			// One replica: it makes its serving certificate and writes its CA
			// into the configuration at start; a second would overwrite it.
			Replicas: ptr.To[int32](1),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{
					ServiceAccountName: AdmissionName,
					PriorityClassName:  PriorityClassName,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Tolerations: []corev1.Toleration{
						{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						{Key: "node-role.kubernetes.io/master", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
					},
					Containers: []corev1.Container{{
						Name: "admission", Image: o.Image, ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{"slipway"}, Args: append([]string{"ops", "webhook", "--config-name", cfg.Name,
							"--service-host", admissionServiceHost(o)}, webhookManifestArgs(o)...),
						Env:   []corev1.EnvVar{fieldEnv(EnvNamespace, "metadata.namespace")},
						Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: AdmissionPort, Protocol: corev1.ProtocolTCP}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							RunAsNonRoot: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
						},
					}},
				},
			},
		},
	}
	return append(objs, svc, dep, cfg)
}

// webhookManifestArgs are the manifest options the webhook renders its
// policies from (the same Options as this manifest's).
func webhookManifestArgs(o Options) []string {
	args := []string{"--image", o.Image, "--github-download-base", o.GitHubDownloadBase,
		"--host-system-dir", o.HostSystemDir, "--host-lock-dir", o.HostLockDir}
	for _, v := range o.JobImages {
		args = append(args, "--job-image", v)
	}
	for _, v := range o.jobCommand() {
		args = append(args, "--job-command", v)
	}
	for _, v := range o.MirrorDirs {
		args = append(args, "--mirror-dir", v)
	}
	for _, v := range o.tokenSecrets() {
		args = append(args, "--token-secret", v)
	}
	for _, v := range o.releaseSources() {
		args = append(args, "--release-source", v)
	}
	return args
}

// forOldServers adapts the agent's and the controller's pods to the
// webhook isolation: the isolation mode in their environment, and
// AppArmor's unconfined profile as the annotation that servers before
// 1.30 read (they drop the securityContext field).
func forOldServers(o Options, objs []any) {
	env := corev1.EnvVar{Name: IsolationEnv, Value: IsolationWebhook}
	for _, obj := range objs {
		var tmpl *corev1.PodTemplateSpec
		switch t := obj.(type) {
		case *appsv1.DaemonSet:
			tmpl = &t.Spec.Template
		case *appsv1.Deployment:
			if t.Name != ControllerName {
				continue
			}
			tmpl = &t.Spec.Template
		default:
			continue
		}
		for i := range tmpl.Spec.Containers {
			c := &tmpl.Spec.Containers[i]
			c.Env = append(c.Env, env)
			if sc := c.SecurityContext; sc != nil && sc.AppArmorProfile != nil && sc.AppArmorProfile.Type == corev1.AppArmorProfileTypeUnconfined {
				if tmpl.Annotations == nil {
					tmpl.Annotations = map[string]string{}
				}
				tmpl.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name] = corev1.DeprecatedAppArmorBetaProfileNameUnconfined
			}
		}
	}
}

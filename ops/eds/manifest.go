package eds

import (
	"bytes"
	"fmt"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/manifest"
)

// ManifestOptions shape `slipway eds manifest`.
type ManifestOptions struct {
	// Namespace of the controller, its Lease and its ServiceAccount.
	Namespace string
	// Image of the controller.
	Image string
	// Out receives the YAML.
	Out io.Writer
}

// controllerName names the controller's Deployment, ServiceAccount, roles and Lease.
const controllerName = "slipway-eds-controller"

// WriteManifest writes the CRDs, the least-privilege RBAC and the
// controller's Deployment (leader-elected, two replicas) as one YAML stream.
func WriteManifest(o ManifestOptions) error {
	objs, err := ManifestObjects(o)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	for _, obj := range objs {
		raw, err := manifest.Marshal(obj)
		if err != nil {
			return err
		}
		buf.WriteString("---\n")
		buf.Write(raw)
	}
	_, err = o.Out.Write(buf.Bytes())
	return err
}

// ManifestObjects are the objects WriteManifest writes.
func ManifestObjects(o ManifestOptions) ([]any, error) {
	if o.Namespace == "" || o.Image == "" {
		return nil, fmt.Errorf("eds manifest: --namespace and --image are required")
	}
	defs, err := crds.OfGroup(v1.SchemeGroupVersion.Group)
	if err != nil {
		return nil, err
	}
	objs := []any{&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: o.Namespace}}}
	for _, d := range defs {
		objs = append(objs, d)
	}
	meta := metav1.ObjectMeta{Name: controllerName, Namespace: o.Namespace, Labels: map[string]string{"app.kubernetes.io/name": controllerName, "app.kubernetes.io/part-of": "slipway"}}
	objs = append(objs,
		&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta},
		&rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: controllerName, Labels: meta.Labels}, Rules: ClusterRules()},
		&rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: controllerName, Labels: meta.Labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: controllerName},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: controllerName, Namespace: o.Namespace}}},
		&rbacv1.Role{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"}, ObjectMeta: meta,
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}}}},
		&rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"}, ObjectMeta: meta,
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: controllerName},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: controllerName, Namespace: o.Namespace}}},
		deployment(o, meta),
	)
	objs = append(objs, migrationPolicy(o, meta.Labels).Objects()...)
	return objs, nil
}

// ClusterRules are exactly the cluster-wide permissions the controller uses.
func ClusterRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{v1.SchemeGroupVersion.Group}, Resources: []string{"extendeddaemonsets"}, Verbs: []string{"list", "watch", "patch"}},
		{APIGroups: []string{v1.SchemeGroupVersion.Group}, Resources: []string{"extendeddaemonsetreplicasets"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
		{APIGroups: []string{v1.SchemeGroupVersion.Group}, Resources: []string{"extendeddaemonsetsettings"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{v1.SchemeGroupVersion.Group}, Resources: []string{"extendeddaemonsets/status", "extendeddaemonsetreplicasets/status", "extendeddaemonsetsettings/status"}, Verbs: []string{"update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch", "create", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"podtemplates"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get", "update"}},
	}
}

func deployment(o ManifestOptions, meta metav1.ObjectMeta) *appsv1.Deployment {
	replicas := int32(2)
	sel := map[string]string{"app.kubernetes.io/name": controllerName}
	no, yes := false, true
	nonRoot := int64(65532)
	return &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: meta.Labels},
				Spec: corev1.PodSpec{ServiceAccountName: controllerName,
					// Pod Security `restricted`: a non-root uid the kubelet can check
					// (runAsNonRoot alone needs the image's User), the runtime's seccomp profile.
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &nonRoot, RunAsGroup: &nonRoot,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: "controller", Image: o.Image,
						Args:  []string{"eds", "controller", "--leader-elect", "--lease-namespace", o.Namespace, "--metrics-addr", ":9480"},
						Env:   []corev1.EnvVar{{Name: "SLIPWAY_EDS_IDENTITY", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
						Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9480}},
						// /healthz: every worker idle or within its sync's allowance
						// (leader or not); /readyz: the informers synced.
						LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("metrics")}},
							InitialDelaySeconds: 10, PeriodSeconds: 20, FailureThreshold: 3},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("metrics")}},
							PeriodSeconds: 5},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes, RunAsNonRoot: &yes,
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}}}}}}
}

// Package manifest builds the objects that deploy the swarm controller: its
// namespace, the Swarm CRD, least-privilege RBAC (a namespaced Role: the
// controller reads and writes nothing outside its namespace), the
// controller's Deployment (two replicas, one leading through a Lease), and
// the Role a worker pod's ServiceAccount needs to report its version.
// `slipway swarm manifest` prints them.
package manifest

import (
	"bytes"
	"fmt"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"slipway.dev/slipway/ops/crds"
	opsmanifest "slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/version"
)

// Names of the objects.
const (
	ControllerName = "slipway-swarm-controller"
	WorkerName     = "slipway-swarm-worker"
	// HTTPPort serves /assignments, /metrics, /healthz and /readyz.
	HTTPPort = 9480
)

// Options say what to render.
type Options struct {
	// Namespace holds the controller, its Swarms, their workers and ConfigMaps.
	Namespace string
	// Image runs the controller.
	Image string
	// Replicas of the controller (one leads at a time).
	Replicas int32
}

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = opsmanifest.DefaultNamespace
	}
	if o.Image == "" {
		o.Image = opsmanifest.DefaultImage()
	}
	if o.Replicas <= 0 {
		o.Replicas = 2
	}
	return o
}

// Write renders the manifest to w.
func Write(w io.Writer, o Options) error {
	body, err := Render(o)
	if err != nil {
		return err
	}
	_, err = w.Write(body)
	return err
}

// Render returns the manifest as a multi-document YAML stream.
func Render(o Options) ([]byte, error) {
	objs, err := Objects(o)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteString("# slipway swarm controller, rendered by `slipway swarm manifest` (" + version.Version + ").\n")
	for _, obj := range objs {
		doc, err := opsmanifest.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("render the swarm manifest: %w", err)
		}
		buf.WriteString("---\n")
		buf.Write(doc)
	}
	return buf.Bytes(), nil
}

// Objects returns the manifest's objects in the order they apply.
func Objects(o Options) ([]any, error) {
	o = o.withDefaults()
	crdObjs, err := crds.OfGroup("swarm.slipway.dev")
	if err != nil {
		return nil, err
	}
	objs := []any{&corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Namespace, Labels: labels("namespace")},
	}}
	for _, c := range crdObjs {
		objs = append(objs, c)
	}
	objs = append(objs, RBAC(o.Namespace)...)
	objs = append(objs, WorkerAdmission(o.Namespace)...)
	objs = append(objs, ControllerAdmission(o.Namespace)...)
	return append(objs, deployment(o)), nil
}

func labels(component string) map[string]string {
	return map[string]string{"app.kubernetes.io/part-of": "slipway", "app.kubernetes.io/component": "swarm-" + component}
}

// ControllerRules are exactly what the controller calls in its namespace:
// Swarms watched and their status written; worker pods watched and deleted
// (restart refresh); ConfigMaps watched, the workers' one created and
// updated; StatefulSets, Deployments and their ReplicaSets watched; Events;
// its Lease. None can be narrowed by resourceNames: every object it writes
// is named by a Swarm or a worker of the day (a Swarm's spec.configMap, a
// worker's pod and Lease), and create takes no names; the admission
// policies (ControllerAdmission) bind which objects it may write instead.
func ControllerRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"swarm.slipway.dev"}, Resources: []string{"swarms"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"swarm.slipway.dev"}, Resources: []string{"swarms/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch", "create", "update"}},
		{APIGroups: []string{"apps"}, Resources: []string{"statefulsets", "deployments", "replicasets"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
	}
}

// WorkerRules are what `slipway swarm worker` calls: a patch of its own
// pod's annotation, and its own Lease (package member).
func WorkerRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}
}

// RBAC returns the ServiceAccounts, Roles and RoleBindings of the
// controller and of the workers, in namespace.
func RBAC(namespace string) []any {
	var out []any
	for _, r := range []struct {
		name  string
		rules []rbacv1.PolicyRule
	}{{ControllerName, ControllerRules()}, {WorkerName, WorkerRules()}} {
		meta := metav1.ObjectMeta{Name: r.name, Namespace: namespace, Labels: labels("rbac")}
		out = append(out,
			&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta},
			&rbacv1.Role{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"}, ObjectMeta: meta, Rules: r.rules},
			&rbacv1.RoleBinding{
				TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"}, ObjectMeta: meta,
				RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: r.name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: r.name, Namespace: namespace}},
			})
	}
	return out
}

// deployment runs the controller, non-root on a read-only root.
func deployment(o Options) *appsv1.Deployment {
	lbl := map[string]string{"app.kubernetes.io/name": ControllerName}
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(HTTPPort)}}}
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: ControllerName, Namespace: o.Namespace, Labels: labels("controller")},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(o.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{
					ServiceAccountName: ControllerName,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65534), RunAsGroup: ptr.To[int64](65534),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: "controller", Image: o.Image,
						Args: []string{"swarm", "controller", "--namespace=$(POD_NAMESPACE)", "--identity=$(POD_NAME)", fmt.Sprintf("--http=:%d", HTTPPort)},
						Env: []corev1.EnvVar{
							{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
						},
						Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: HTTPPort}},
						ReadinessProbe: probe("/readyz"), LivenessProbe: probe("/healthz"),
						SecurityContext: &corev1.SecurityContext{
							ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
}

package manifest

import (
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"slipway.dev/slipway/ops/admission"
)

// The controller, `slipway ops controller`: a Deployment of two replicas
// that elect one holder of ControllerLease, which does the fleet view of
// every channel (polls, resolves releases, grants slots and staging
// permits, writes channel status). No node's agent does any of that.

// ControllerName names the Deployment, its ServiceAccount and its RBAC objects.
const ControllerName = "slipway-controller"

// ControllerLease is the Lease the controller's replicas compete for
// (ops/protocol's ControllerLease; a test keeps them equal).
const ControllerLease = "slipway-channel-controller"

// EnvPodName is the controller pod's name (downward API): its Lease identity.
const EnvPodName = "POD_NAME"

// ControllerUser is the user name the controller's service account acts as.
func ControllerUser(namespace string) string {
	return "system:serviceaccount:" + namespace + ":" + ControllerName
}

// controllerClusterRules are exactly what the controller calls across the
// cluster: the channel's nodes (listed and watched as metadata: the nodes
// report their slots on their own Node; a slot's or a candidate's Node read
// by name; each node's channel views written on it, and the cordon of the
// nodes it drains, which controllerNodePolicy holds to those), the pods it
// drains from any namespace (listed, evicted, deleted under drain.force)
// and Events on the channels.
func controllerClusterRules(Options) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
}

// controllerNamespacedRules are exactly what the controller calls in the
// namespace: the channels (watched, their status written), the Leases
// (its own, controllerLeasePolicy admits no other write; the agents'
// heartbeats and the server slot read), a slot's Job read by name, the
// token Secrets by name only (a GitHub channel's release is resolved with
// its token), and the nodes' NodeUpdates: watched, created, their spec
// patched (the nodes' instructions); never their status, the nodes'
// reports (controllerNodeUpdatePolicy holds their metadata plain). The
// garbage collector deletes each with its Node, its owner.
func controllerNamespacedRules(o Options) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: o.tokenSecrets()},
		{APIGroups: []string{"ops.slipway.dev"}, Resources: []string{"updatechannels"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"ops.slipway.dev"}, Resources: []string{"updatechannels/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{"ops.slipway.dev"}, Resources: []string{"nodeupdates"}, Verbs: []string{"list", "watch", "create", "patch"}},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}, // a slot's Pod (staleSlots)
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}
}

// controllerNodeUpdatePolicy holds the NodeUpdates the controller writes
// plain: no finalizer (it would pin the object past its node), no
// generated name (each is named after its node), and no owner reference
// but its own Node's (the garbage collector then deletes it with the Node).
func controllerNodeUpdatePolicy(o Options) admission.UserPolicy {
	return admission.UserPolicy{
		Name: ControllerName + "-nodeupdates-" + o.Namespace, Labels: labels("controller"), Users: []string{ControllerUser(o.Namespace)}, Namespace: o.Namespace,
		Group: "ops.slipway.dev", Version: "v1", Resource: "nodeupdates", Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
		Validations: []admissionv1.Validation{{
			Expression: "!has(object.metadata.finalizers) && !has(object.metadata.generateName) && " +
				"object.metadata.?ownerReferences.orValue([]).all(r, r.apiVersion == 'v1' && r.kind == 'Node' && r.name == object.metadata.name)",
			Message: "the slipway controller may write a NodeUpdate only without finalizer or generated name, owned by nothing but its own Node",
		}},
	}
}

// ControllerRules are the controller's RBAC rules: across the cluster and in its namespace.
func ControllerRules(o Options) (cluster, namespaced []rbacv1.PolicyRule) {
	o = o.WithDefaults()
	return controllerClusterRules(o), controllerNamespacedRules(o)
}

// controllerRBAC returns the controller's ServiceAccount, roles and bindings.
func controllerRBAC(o Options) []any {
	return roleObjects(ControllerName, o.Namespace, labels("controller"), controllerClusterRules(o), controllerNamespacedRules(o))
}

// controllerLeasePolicy lets the controller write only its own Lease.
func controllerLeasePolicy(o Options) admission.UserPolicy {
	return admission.UserPolicy{
		Name: ControllerName + "-leases-" + o.Namespace, Labels: labels("controller"), Users: []string{ControllerUser(o.Namespace)}, Namespace: o.Namespace,
		Group: "coordination.k8s.io", Version: "v1", Resource: "leases", Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
		Validations: []admissionv1.Validation{{
			Expression: fmt.Sprintf("object.metadata.name == %q && ", ControllerLease) + LeaseMetadataPlain,
			Message:    "the slipway controller may write only its own election Lease " + ControllerLease + " (no owner reference, finalizer or generated name)",
		}},
	}
}

// ChannelViewPrefix is the annotation prefix of the nodes' channel views,
// which only the controller writes (ops/protocol's AnnotationChannelViewPrefix;
// a test in ops/controller keeps them equal).
const ChannelViewPrefix = "channel.ops.slipway.dev/"

// DrainAnnotationPrefix is the prefix of the annotations of slipway's
// cordon and drain (ops/drain's and ops/protocol's drain record).
const DrainAnnotationPrefix = "drain.slipway.dev/"

// controllerNodePolicy lets the controller change, on any Node, only the
// channel views and its cordon (spec.unschedulable and the drain's record
// under drain.slipway.dev/): no label, no other annotation, nothing else
// of the spec.
func controllerNodePolicy(o Options) admission.UserPolicy {
	return admission.UserPolicy{
		Name: ControllerName + "-nodes-" + o.Namespace, Labels: labels("controller"), Users: []string{ControllerUser(o.Namespace)},
		Group: "", Version: "v1", Resource: "nodes", Operations: []admissionv1.OperationType{admissionv1.Update},
		Validations: []admissionv1.Validation{
			{Expression: admission.SpecUnchangedButUnschedulable, Message: "the slipway controller may change only spec.unschedulable (the cordon) of a Node's spec"},
			{Expression: admission.NodeMetadataFrozen, Message: "the slipway controller may change only labels and annotations of a Node's metadata (no owner reference, no finalizer)"},
			{Expression: admission.OnlyKeysChanged("labels"), Message: "the slipway controller may not change a Node's labels"},
			{Expression: admission.OnlyKeysChanged("annotations", ChannelViewPrefix, DrainAnnotationPrefix),
				Message: "the slipway controller may change only the channel views (" + ChannelViewPrefix + "<channel UID>) and the drain's record (" + DrainAnnotationPrefix + ") of a Node's annotations"},
		},
	}
}

// deployment runs two replicas of `slipway ops controller`, preferring
// control-plane nodes (no workload's node goes down under it as often).
// The pod meets Pod Security's `restricted` level: not root, no
// capabilities, read-only root filesystem, the runtime's seccomp profile;
// the only host paths are the mirror directories of file:// channels (it
// resolves `latest` there), read-only.
func deployment(o Options) *appsv1.Deployment {
	lbl := labels("controller")
	lbl["app.kubernetes.io/name"] = ControllerName
	selector := map[string]string{"app.kubernetes.io/name": ControllerName}
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for i, dir := range o.MirrorDirs {
		vols = append(vols, hostPathVolume(fmt.Sprintf("mirror-%d", i), dir, corev1.HostPathDirectory))
		mounts = append(mounts, corev1.VolumeMount{Name: fmt.Sprintf("mirror-%d", i), MountPath: dir, ReadOnly: true})
	}
	controlPlane := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.NodeSelectorOpExists}}}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: ControllerName, Namespace: o.Namespace, Labels: lbl},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{
					ServiceAccountName: ControllerName,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
						{Weight: 100, Preference: controlPlane}}}},
					Tolerations: []corev1.Toleration{
						{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						{Key: "node-role.kubernetes.io/master", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
					},
					TerminationGracePeriodSeconds: ptr.To[int64](30),
					Containers: []corev1.Container{{
						Name: "controller", Image: o.Image, ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{"slipway"}, Args: []string{"ops", "controller"},
						Env:           []corev1.EnvVar{fieldEnv(EnvPodName, "metadata.name"), fieldEnv(EnvNamespace, "metadata.namespace")},
						Ports:         []corev1.ContainerPort{{Name: "metrics", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP}},
						LivenessProbe: probe("/healthz"), ReadinessProbe: probe("/readyz"),
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							RunAsNonRoot: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
						},
						VolumeMounts: mounts,
					}},
					Volumes: vols,
				},
			},
		},
	}
}

package manifest

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/admission"
)

// clusterRules are exactly what the agent calls across the cluster: Nodes
// (its own watched, labelled, uncordoned: the ValidatingAdmissionPolicy of
// ownNodePolicy refuses a patch of any other), Events (client-go's
// recorder, core group), and, only with InstallCRDs, the CRD. No pod: the
// controller (controller.go) drains, since RBAC cannot say "pods on my
// node"; it also lists the fleet's nodes.
func clusterRules(o Options) []rbacv1.PolicyRule {
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if o.InstallCRDs {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get", "create", "update"}})
	}
	return rules
}

// AgentUser is the user name the agent's service account acts as.
func AgentUser(namespace string) string {
	return "system:serviceaccount:" + namespace + ":" + AgentName
}

// ownNodePolicy holds each agent to its own Node: it may cordon and
// uncordon it and write slipway's labels and annotations on it, nothing
// else and on no other Node.
func ownNodePolicy(o Options) admission.NodeAgentPolicy {
	return admission.NodeAgentPolicy{
		Name: AgentName + "-own-node-" + o.Namespace, Labels: labels("agent"),
		User: AgentUser(o.Namespace), Agent: "the slipway agent",
		LabelPrefixes:      []string{"ops.slipway.dev/"},
		AnnotationPrefixes: []string{"ops.slipway.dev/", "drain.slipway.dev/"},
		MayCordon:          true,
	}
}

// namespacedRules are exactly what the agent calls in its own namespace:
// the upgrade Jobs of its node (watched, created; finished Jobs are kept
// as the record of an attempt; jobPolicy admits only slipway's shape on
// its own node) and their pods (watched), its slot's Pods (created,
// deleted a day after they finished: slotPodPolicy and
// slotPodDeletePolicy admit only its own node's; none under the webhook
// isolation, where a slot's work stays a Job: SlotPods), its heartbeat Lease
// (leasePolicy admits no other), and its node's NodeUpdate: read (the
// controller's instructions in its spec) and its status written (the
// node's reports; nodeUpdatePolicy admits its own node's only), never its
// spec, never created or deleted. No channel: the controller writes what
// the node needs of each (its view). No Secret: the controller resolves
// the releases.
func namespacedRules(o Options) []rbacv1.PolicyRule {
	pods := []string{"list", "watch"} // the Jobs' pods: done a second before the Job
	if o.SlotPods() {
		// The slot Pods (slotPodPolicy admits only its node's slot's, bound
		// to it; slotPodDeletePolicy lets it delete only those).
		pods = append(pods, "create", "delete")
	}
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"list", "watch", "create"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: pods},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{"ops.slipway.dev"}, Resources: []string{"nodeupdates"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"ops.slipway.dev"}, Resources: []string{"nodeupdates/status"}, Verbs: []string{"patch"}},
	}
}

// rbac returns the agent's and the controller's ServiceAccounts, roles and bindings.
func rbac(o Options) []any {
	return append(roleObjects(AgentName, o.Namespace, labels("agent"), clusterRules(o), namespacedRules(o)), controllerRBAC(o)...)
}

// roleObjects are a ServiceAccount name in namespace with cluster and
// namespaced rules: a ClusterRole (one per installation: name-namespace),
// a Role, and their bindings.
func roleObjects(name, namespace string, lbl map[string]string, cluster, namespaced []rbacv1.PolicyRule) []any {
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}}
	clusterName := name + "-" + namespace
	return []any{
		&corev1.ServiceAccount{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: lbl},
		},
		&rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: clusterName, Labels: lbl},
			Rules:      cluster,
		},
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: clusterName, Labels: lbl},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterName},
			Subjects:   subject,
		},
		&rbacv1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: lbl},
			Rules:      namespaced,
		},
		&rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: lbl},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   subject,
		},
	}
}

// AccessObjects are the manifest's objects that say what the agent and the
// controller may do: the namespace, ServiceAccounts, RBAC and admission
// policies. Tests run agents and the controller under exactly these.
func AccessObjects(o Options) []any {
	o = o.WithDefaults()
	return append(append([]any{namespace(o)}, rbac(o)...), policies(o)...)
}

// Rules are the agent's RBAC rules: across the cluster and in its namespace.
func Rules(o Options) (cluster, namespaced []rbacv1.PolicyRule) {
	o = o.WithDefaults()
	return clusterRules(o), namespacedRules(o)
}

package updateoperator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/admission"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/manifest"
)

// ManifestOptions configure `slipway update-operator manifest`.
type ManifestOptions struct {
	Namespace string // default "slipway-update-operator"
	Image     string
	Prefix    string
	// Platform of the agents and its arguments (e.g. --source URL).
	Platform  string
	AgentArgs []string
	// ControllerArgs are added to the controller's command line.
	ControllerArgs []string
	// OSImagePattern is the controller's --os-image-pattern: the nodes it
	// labels, so the agent DaemonSet lands only there (default: the
	// platform's OS, PlatformOSImagePattern).
	OSImagePattern string
	Out            io.Writer
}

// Names of the manifest's objects.
const (
	DefaultNamespace = "slipway-update-operator"
	ControllerName   = "update-operator-controller"
	AgentName        = "update-operator-agent"
	PriorityName     = "slipway-update-operator"
	LeaseName        = "slipway-update-operator"
)

func (o *ManifestOptions) defaults() error {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Image == "" {
		o.Image = manifest.DefaultImage()
	}
	if o.Platform == "" {
		o.Platform = "slipway"
	}
	if o.OSImagePattern == "" {
		o.OSImagePattern = PlatformOSImagePattern(o.Platform)
	}
	_, err := NewKeys(o.Prefix)
	return err
}

// Manifest writes the YAML documents that deploy the operator.
func Manifest(_ context.Context, o ManifestOptions) error {
	objs, err := ManifestObjects(o)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	for _, obj := range objs {
		b, err := manifest.Marshal(obj)
		if err != nil {
			return err
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	_, err = o.Out.Write(buf.Bytes())
	return err
}

// ManifestObjects are the typed objects of the manifest, in apply order.
func ManifestObjects(o ManifestOptions) ([]any, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	keys, _ := NewKeys(o.Prefix)
	objs := []any{
		&corev1.Namespace{TypeMeta: tm("v1", "Namespace"), ObjectMeta: metav1.ObjectMeta{Name: o.Namespace, Labels: namespaceLabels()}},
		&schedulingv1.PriorityClass{TypeMeta: tm("scheduling.k8s.io/v1", "PriorityClass"), ObjectMeta: metav1.ObjectMeta{Name: PriorityName, Labels: appLabels("")},
			Value: 1000000, Description: "The slipway update operator: it must run to put updated nodes back in service."},
	}
	objs = append(objs, rbacObjects(o)...)
	objs = append(objs, admissionObjects(o, keys)...)
	objs = append(objs, controllerDeployment(o, keys), agentDaemonSet(o, keys))
	return objs, nil
}

// PlatformOSImagePattern is the osImage of the nodes a platform's agent
// serves: in a cluster of k3OS and Bottlerocket nodes, each operator's
// DaemonSet lands only on its own OS's nodes (the controller labels only
// those), never on the other's, where the host path it needs is missing.
func PlatformOSImagePattern(platform string) string {
	switch platform {
	case "bottlerocket-api":
		return `(?i)^bottlerocket`
	case "slipway":
		return `(?i)^k3os`
	}
	return DefaultOSImagePattern
}

func tm(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

func appLabels(component string) map[string]string {
	l := map[string]string{"app.kubernetes.io/name": "slipway-update-operator", "app.kubernetes.io/part-of": "slipway"}
	if component != "" {
		l["app.kubernetes.io/component"] = component
	}
	return l
}

// ControllerRules are exactly what the controller calls across the
// cluster: Nodes (watched, labelled, annotated, cordoned), the pods it
// drains (listed, evicted), the workloads whose health gates the next node.
func ControllerRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets", "replicasets"}, Verbs: []string{"get"}},
	}
}

// AgentRules are what the agent calls: its Node only (watched by a field
// selector, patched; the ValidatingAdmissionPolicy holds it to its own).
func AgentRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}}}
}

func rbacObjects(o ManifestOptions) []any {
	var out []any
	events := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}}}
	// The controller reads and renews only its election Lease (create cannot
	// be narrowed by name: it makes the Lease the first time).
	// Its fleet state likewise: the ConfigMap only it writes (fleet.go).
	leases := []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "update"}, ResourceNames: []string{LeaseName}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "patch"}, ResourceNames: []string{FleetStateName(o.Prefix)}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}}}
	for _, sa := range []struct {
		name    string
		cluster []rbacv1.PolicyRule
		ns      []rbacv1.PolicyRule
	}{{ControllerName, ControllerRules(), leases}, {AgentName, AgentRules(), nil}} {
		subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.name, Namespace: o.Namespace}}
		global := sa.name + "-" + o.Namespace
		labels := appLabels(sa.name)
		out = append(out,
			&corev1.ServiceAccount{TypeMeta: tm("v1", "ServiceAccount"), ObjectMeta: metav1.ObjectMeta{Name: sa.name, Namespace: o.Namespace, Labels: labels}},
			&rbacv1.ClusterRole{TypeMeta: tm("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: global, Labels: labels}, Rules: sa.cluster},
			&rbacv1.ClusterRoleBinding{TypeMeta: tm("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: global, Labels: labels},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: global}, Subjects: subject},
			// Node Events live in the default namespace, as the kubelet's do.
			&rbacv1.Role{TypeMeta: tm("rbac.authorization.k8s.io/v1", "Role"), ObjectMeta: metav1.ObjectMeta{Name: global + "-events", Namespace: eventNamespace, Labels: labels}, Rules: events},
			&rbacv1.RoleBinding{TypeMeta: tm("rbac.authorization.k8s.io/v1", "RoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: global + "-events", Namespace: eventNamespace, Labels: labels},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: global + "-events"}, Subjects: subject},
		)
		if sa.ns != nil {
			out = append(out,
				&rbacv1.Role{TypeMeta: tm("rbac.authorization.k8s.io/v1", "Role"), ObjectMeta: metav1.ObjectMeta{Name: sa.name, Namespace: o.Namespace, Labels: labels}, Rules: sa.ns},
				&rbacv1.RoleBinding{TypeMeta: tm("rbac.authorization.k8s.io/v1", "RoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: sa.name, Namespace: o.Namespace, Labels: labels},
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa.name}, Subjects: subject})
		}
	}
	return out
}

// AgentAnnotations are the annotation keys the agent writes (under the
// prefix), and AgentLabels its labels: its host's report, never the
// controller's keys (the intent wanted, the times and counts that gate
// the rollout, the target, the cordon's record).
var (
	AgentAnnotations = []string{KeyActionActive, KeyActionState, KeyUpdateAvailable, KeyCurrentVersion, KeyAvailableVersion,
		KeyStagedVersion, KeyRebootBootID, KeyReason}
	AgentLabels = []string{KeyUpdateAvailable}
)

// ControllerAnnotations are the annotation keys the controller writes
// (under the prefix), and ControllerLabels its labels; the cordon's record
// (drain.AnnotationCordonedBy, drain.AnnotationSchedulableBefore) and the
// hooks' check annotations (--before-reboot-checks, --after-reboot-checks)
// are the only other keys it writes.
var (
	ControllerAnnotations = []string{KeyActionWanted, KeyTargetVersion, KeyReason, KeyFailures, KeyLastFailure, KeyTransition,
		KeyFinished, KeyWorkloads, KeyDrainStarted, KeyAhead}
	ControllerLabels = []string{KeyInterfaceVersion, KeyBeforeReboot, KeyAfterReboot}
)

// Names of the Node policies.
const (
	policyName           = "slipway-update-operator-agent-own-node"
	controllerPolicyName = "slipway-update-operator-controller-nodes"
)

// OnlyExactKeysChanged is a CEL expression: every key of metadata.<field>
// added, changed or removed is one of keys, exactly (a key that merely
// begins like one is refused).
func OnlyExactKeysChanged(field string, keys []string) string {
	return fmt.Sprintf(`(has(object.metadata.%[1]s) ? object.metadata.%[1]s : {}).all(k, k in %[2]s || (has(oldObject.metadata.%[1]s) && k in oldObject.metadata.%[1]s && oldObject.metadata.%[1]s[k] == object.metadata.%[1]s[k])) && `+
		`(has(oldObject.metadata.%[1]s) ? oldObject.metadata.%[1]s : {}).all(k, k in %[2]s || (has(object.metadata.%[1]s) && k in object.metadata.%[1]s))`,
		field, admission.CELList(keys))
}

// nodePolicy is the Node policy of one of the operator's service accounts:
// it may change exactly labels and annotations (full keys), the spec only
// when mayCordon (and then only spec.unschedulable), no other metadata,
// and, with ownNode, only the Node its bound token names.
func nodePolicy(name, user, who string, labels, annotations []string, ownNode, mayCordon bool) admission.UserPolicy {
	var vs []admissionv1.Validation
	if ownNode {
		vs = append(vs, admissionv1.Validation{Expression: admission.OwnNode, Message: who + " may change only the Node it runs on"})
	}
	if mayCordon {
		vs = append(vs, admissionv1.Validation{Expression: admission.SpecUnchangedButUnschedulable,
			Message: who + " may change only spec.unschedulable (the cordon) of a Node's spec"})
	} else {
		vs = append(vs, admissionv1.Validation{Expression: "object.spec == oldObject.spec", Message: who + " may not change a Node's spec"})
	}
	vs = append(vs,
		// Every metadata field but labels and annotations (and what the API
		// server writes on each update) is frozen, as the ops policies do: an
		// ownerReference gets a Node deleted by the garbage collector, a
		// finalizer pins its deletion, and a field a later Kubernetes adds is
		// frozen too.
		admissionv1.Validation{Expression: admission.NodeMetadataFrozen,
			Message: who + " may change only labels and annotations of a Node's metadata (no owner reference, no finalizer)"},
		admissionv1.Validation{Expression: OnlyExactKeysChanged("labels", labels), Message: who + " may change only the labels " + strings.Join(labels, ", ")},
		admissionv1.Validation{Expression: OnlyExactKeysChanged("annotations", annotations), Message: who + " may change only the annotations " + strings.Join(annotations, ", ")},
	)
	return admission.UserPolicy{Name: name, Users: []string{user}, Group: "", Version: "v1", Resource: "nodes",
		Operations: []admissionv1.OperationType{admissionv1.Update}, Validations: vs}
}

// agentPolicy holds an agent to its own Node: the Node's name must be the
// node name the API server put in the agent's bound service-account token,
// and the agent may change only the keys it writes (AgentAnnotations,
// AgentLabels): not the controller's, so a node taken over cannot want
// an intent, take or hold a slot, or move a time the rollout counts from;
// nor any other metadata (an ownerReference would get its own Node
// deleted, and every pod on it past their disruption budgets).
func agentPolicy(namespace string, keys Keys) admission.UserPolicy {
	p := nodePolicy(policyName, fmt.Sprintf("system:serviceaccount:%s:%s", namespace, AgentName), "the update-operator agent",
		keys.full(AgentLabels), keys.full(AgentAnnotations), true, false)
	p.Labels = appLabels(AgentName)
	return p
}

// controllerPolicy states exactly what the controller may write on a
// Node: its labels and annotations (ControllerLabels,
// ControllerAnnotations, the cordon's record, the hooks' checks named in
// its arguments) and spec.unschedulable; nothing else, so its token cannot
// get a Node deleted (an ownerReference), pin one (a finalizer), taint one
// or write a node's report in its place.
func controllerPolicy(namespace string, keys Keys, checks []string) admission.UserPolicy {
	ann := append(keys.full(ControllerAnnotations), drain.AnnotationCordonedBy, drain.AnnotationSchedulableBefore)
	ann = append(ann, checks...)
	p := nodePolicy(controllerPolicyName, fmt.Sprintf("system:serviceaccount:%s:%s", namespace, ControllerName), "the update-operator controller",
		keys.full(ControllerLabels), ann, false, true)
	p.Labels = appLabels(ControllerName)
	return p
}

// full is the full keys of suffixes.
func (k Keys) full(suffixes []string) []string {
	out := make([]string, len(suffixes))
	for i, s := range suffixes {
		out[i] = k.Key(s)
	}
	return out
}

// hookChecks are the annotation keys named by --before-reboot-checks and
// --after-reboot-checks in the controller's arguments (--flag=a,b or
// --flag a,b, repeated or not): the controller resets them, so its Node
// policy allows them.
func hookChecks(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := strings.TrimPrefix(strings.TrimPrefix(args[i], "-"), "-")
		name, val, hasVal := strings.Cut(a, "=")
		if name != "before-reboot-checks" && name != "after-reboot-checks" {
			continue
		}
		if !hasVal && i+1 < len(args) {
			i++
			val = args[i]
		}
		for _, k := range strings.Split(val, ",") {
			if k = strings.TrimSpace(k); k != "" && !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

// controllerStatePolicies let the controller write, in its namespace,
// only its election Lease and its fleet state ConfigMap (RBAC cannot
// narrow create by name), each with no ownerReference (the garbage
// collector would delete it: a halted rollout's brake and the node records
// with it), no finalizer and no generated name; the ConfigMap never
// immutable (the controller could no longer record a failure).
func controllerStatePolicies(namespace, prefix string) []admission.UserPolicy {
	user := fmt.Sprintf("system:serviceaccount:%s:%s", namespace, ControllerName)
	ops := []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}
	return []admission.UserPolicy{
		{Name: "slipway-update-operator-controller-lease-" + namespace, Labels: appLabels(ControllerName), Users: []string{user}, Namespace: namespace,
			Group: "coordination.k8s.io", Version: "v1", Resource: "leases", Operations: ops,
			Validations: []admissionv1.Validation{{Expression: fmt.Sprintf("object.metadata.name == %q && %s", LeaseName, manifest.LeaseMetadataPlain),
				Message: "the update-operator controller may write only its election Lease " + LeaseName + " (no owner reference, finalizer or generated name)"}}},
		{Name: "slipway-update-operator-controller-state-" + namespace, Labels: appLabels(ControllerName), Users: []string{user}, Namespace: namespace,
			Group: "", Version: "v1", Resource: "configmaps", Operations: ops,
			Validations: []admissionv1.Validation{{Expression: fmt.Sprintf("object.metadata.name == %q && %s && !object.?immutable.orValue(false)",
				FleetStateName(prefix), manifest.LeaseMetadataPlain),
				Message: "the update-operator controller may write only its fleet state ConfigMap " + FleetStateName(prefix) + " (no owner reference, finalizer or generated name, not immutable)"}}},
	}
}

func admissionObjects(o ManifestOptions, keys Keys) []any {
	out := append(agentPolicy(o.Namespace, keys).Objects(), controllerPolicy(o.Namespace, keys, hookChecks(o.ControllerArgs)).Objects()...)
	for _, p := range controllerStatePolicies(o.Namespace, keys.Prefix) {
		out = append(out, p.Objects()...)
	}
	return out
}

// namespaceLabels are the namespace's: the app's, and the Pod Security level
// its agent needs (privileged or super_t container, host paths), so a
// cluster whose default level is baseline or restricted admits the agents;
// audited at restricted, as `slipway ops manifest` labels its namespace.
func namespaceLabels() map[string]string {
	l := appLabels("")
	l["pod-security.kubernetes.io/enforce"] = "privileged"
	l["pod-security.kubernetes.io/enforce-version"] = "latest"
	l["pod-security.kubernetes.io/audit"] = "restricted"
	l["pod-security.kubernetes.io/audit-version"] = "latest"
	return l
}

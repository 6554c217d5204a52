package manifest

import (
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/admission"
	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/config"
	"slipway.dev/slipway/ops/swarm/member"
)

// PodNameExtra is the user-info extra in which the API server names the pod
// a bound service-account token belongs to.
const PodNameExtra = "authentication.kubernetes.io/pod-name"

// WorkerPolicyName is the name of the workers' ValidatingAdmissionPolicy
// (and binding) of namespace.
func WorkerPolicyName(namespace string) string { return WorkerName + "." + namespace }

// WorkerAdmission is the ValidatingAdmissionPolicy and binding that confine
// a worker's token to its own report: RBAC grants "patch pods" and "update
// leases" in the whole namespace; the policy, keyed on the pod-name claim
// of the worker's bound token, lets it change only its own pod's
// applied-version annotation (no finalizer, no ownerReference, no label,
// no spec) and only its own Lease (member.LeaseName),
// never the controller's min-config-version on it. A token without a
// pod-name claim (a legacy Secret token) may write nothing.
func WorkerAdmission(namespace string) []any {
	pod := fmt.Sprintf("request.userInfo.extra[%q][0]", PodNameExtra)
	return podsAndLeasesPolicy(WorkerPolicyName(namespace), "is-a-worker", "system:serviceaccount:"+namespace+":"+WorkerName, []admissionv1.Validation{
		{Expression: fmt.Sprintf("%q in request.userInfo.extra", PodNameExtra),
			Message: "a swarm worker writes with its pod's bound token only (no pod-name claim in this one)"},
		{Expression: fmt.Sprintf("request.resource.resource != 'pods' || object.metadata.name == %s", pod),
			Message: "a swarm worker may change only its own pod"},
		{Expression: fmt.Sprintf("request.resource.resource != 'leases' || object.metadata.name == %q + %s", member.LeasePrefix, pod),
			Message: "a swarm worker may write only its own Lease (" + member.LeasePrefix + "<its pod>)"},
		{Expression: "request.resource.resource != 'pods' || (object.spec == oldObject.spec && " + admission.OnlyKeysChanged("labels") +
			" && " + onlyKeyChanged("annotations", swarmv1.AppliedVersionAnnotation) + ")",
			Message: "a swarm worker may change only the " + swarmv1.AppliedVersionAnnotation + " annotation of its pod"},
		// A finalizer would keep its pod (and its share) from going; dropped
		// ownerReferences would take it out of its workload's count.
		{Expression: "request.resource.resource != 'pods' || " + frozenMeta,
			Message: "a swarm worker may not change the finalizers, ownerReferences or generateName of its pod"},
		// An ownerReference on its Lease would have the garbage collector
		// delete it, and the controller's fence with it.
		{Expression: "request.resource.resource != 'leases' || " + plainMeta,
			Message: "a swarm worker's Lease has no ownerReference, finalizer or generateName"},
		{Expression: fmt.Sprintf("request.resource.resource != 'leases' || request.operation == 'CREATE' || "+
			"object.metadata.?annotations[%[1]q].orValue('') == oldObject.metadata.?annotations[%[1]q].orValue('')", member.MinVersionAnnotation),
			Message: "a swarm worker may not change " + member.MinVersionAnnotation + " (the controller's fence)"},
	})
}

// podsAndLeasesPolicy is a ValidatingAdmissionPolicy named name on the
// pod updates and Lease writes of user (condition names the match), with
// its binding (deny).
func podsAndLeasesPolicy(name, condition, user string, validations []admissionv1.Validation) []any {
	fail := admissionv1.Fail
	policy := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels("admission")},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{
				{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				}},
				{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"leases"}},
				}},
			}},
			MatchConditions: []admissionv1.MatchCondition{{Name: condition, Expression: fmt.Sprintf("request.userInfo.username == %q", user)}},
			Validations:     validations,
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels("admission")},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	return []any{policy, binding}
}

// frozenMeta is a CEL expression: an update left the object's finalizers,
// ownerReferences and generateName as they were.
const frozenMeta = "(object.metadata.?finalizers.orValue([]) == oldObject.metadata.?finalizers.orValue([]) && " +
	"object.metadata.?ownerReferences.orValue([]) == oldObject.metadata.?ownerReferences.orValue([]) && " +
	"object.metadata.?generateName.orValue('') == oldObject.metadata.?generateName.orValue(''))"

// plainMeta is a CEL expression: the object has no ownerReference (the
// garbage collector would delete it), no finalizer and no generateName.
const plainMeta = "(!has(object.metadata.ownerReferences) && !has(object.metadata.finalizers) && !has(object.metadata.generateName))"

// ControllerPolicyName is the name of the controller's
// ValidatingAdmissionPolicy (and binding) of namespace.
func ControllerPolicyName(namespace string) string { return ControllerName + "." + namespace }

// ControllerAdmission is the ValidatingAdmissionPolicy and binding that
// confine the controller's pod and Lease writes to what it does: RBAC
// grants "patch pods" and "create, update leases" in the whole namespace;
// the policy lets it change, on a pod, only the workers' share annotation
// (no spec, so no image or toleration of another workload's pod; no label,
// no other annotation, no finalizer, ownerReference or generateName), and
// write only its election Lease and the workers' Leases, on which it may
// only set its fence (member.MinVersionAnnotation), none with an
// ownerReference, finalizer or generateName.
//
// With them comes the policy on its ConfigMap writes (ControllerConfigMaps).
func ControllerAdmission(namespace string) []any {
	return append(controllerPodsAndLeases(namespace), ControllerConfigMaps(namespace).Objects()...)
}

func controllerPodsAndLeases(namespace string) []any {
	worker := fmt.Sprintf("object.metadata.name.startsWith(%q)", member.LeasePrefix)
	return podsAndLeasesPolicy(ControllerPolicyName(namespace), "is-the-controller", "system:serviceaccount:"+namespace+":"+ControllerName, []admissionv1.Validation{
		{Expression: "request.resource.resource != 'pods' || (object.spec == oldObject.spec && " + admission.OnlyKeysChanged("labels") +
			" && " + onlyKeyChanged("annotations", config.ShareAnnotation) + " && " + frozenMeta + ")",
			Message: "the swarm controller may change only the " + config.ShareAnnotation + " annotation of a pod"},
		{Expression: "request.resource.resource != 'leases' || " + plainMeta,
			Message: "the swarm controller's Leases have no ownerReference, finalizer or generateName"},
		{Expression: fmt.Sprintf("request.resource.resource != 'leases' || object.metadata.name == %q || %s", ControllerName, worker),
			Message: "the swarm controller may write only its election Lease " + ControllerName + " and the workers' Leases (" + member.LeasePrefix + "<pod>)"},
		// A worker's Lease: created empty but for the fence, or fenced.
		{Expression: "request.resource.resource != 'leases' || !" + worker + " || (request.operation == 'CREATE' ? " +
			fmt.Sprintf("(object.spec.?holderIdentity.orValue('') == '' && dyn(object.spec).all(k, k == 'holderIdentity') && !has(object.metadata.labels) && "+
				"object.metadata.?annotations.orValue({}).all(k, k == %[1]q))", member.MinVersionAnnotation) +
			" : (object.spec == oldObject.spec && " + admission.OnlyKeysChanged("labels") + " && " + onlyKeyChanged("annotations", member.MinVersionAnnotation) + "))",
			Message: "the swarm controller may only fence a worker's Lease (" + member.MinVersionAnnotation + ")"},
	})
}

// onlyKeyChanged is a CEL expression: of metadata.<field>, no key but key
// itself (exactly: not one that merely begins like it) was added, changed
// or removed.
func onlyKeyChanged(field, key string) string {
	return fmt.Sprintf(`(has(object.metadata.%[1]s) ? object.metadata.%[1]s : {}).all(k, k == %[2]q || (has(oldObject.metadata.%[1]s) && k in oldObject.metadata.%[1]s && oldObject.metadata.%[1]s[k] == object.metadata.%[1]s[k])) && `+
		`(has(oldObject.metadata.%[1]s) ? oldObject.metadata.%[1]s : {}).all(k, k == %[2]q || (has(object.metadata.%[1]s) && k in object.metadata.%[1]s))`, field, key)
}

// ControllerConfigMapsPolicyName is the name of the controller's
// ConfigMap policy (and binding) of namespace.
func ControllerConfigMapsPolicyName(namespace string) string {
	return ControllerName + "-configmaps." + namespace
}

// ControllerConfigMaps confines the controller's ConfigMap writes to the
// workers' ConfigMaps of its Swarms. RBAC grants "create, update
// configmaps" in the whole namespace (a Swarm's ConfigMap is named by its
// spec, so no resourceNames can be listed in advance, and create cannot be
// narrowed by name at all), which would let its token rewrite any
// ConfigMap there: a Swarm's job list (spec.jobsFrom), another
// component's. The policy admits only a ConfigMap labelled
// swarm.slipway.dev/swarm=<swarm> whose one owner reference is that Swarm
// (as controller: deleting the Swarm deletes it), with no finalizer,
// generated name or annotation, not immutable; an update only of a
// ConfigMap that was already so, its labels, annotations and owner
// unchanged. So the token can create new ConfigMaps, each the garbage
// collector's once its Swarm is gone, and rewrite only those; every other
// ConfigMap of the namespace is out of its reach. Its content (config.yml,
// the compressed assignment, the last valid spec) is the controller's to
// write. The policy cannot read the Swarm: the owner's UID and the
// ConfigMap's name (spec.configMap, or <swarm>-worker-config) are not
// compared with the Swarm's.
func ControllerConfigMaps(namespace string) admission.UserPolicy {
	m := func(s string) string {
		return "the swarm controller may write only its Swarms' workers' ConfigMaps: " + s
	}
	return admission.UserPolicy{
		Name: ControllerConfigMapsPolicyName(namespace), Labels: labels("admission"),
		Users: []string{"system:serviceaccount:" + namespace + ":" + ControllerName}, Namespace: namespace,
		Group: "", Version: "v1", Resource: "configmaps", Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
		Variables: []admissionv1.Variable{
			{Name: "swarm", Expression: fmt.Sprintf("object.metadata.?labels[?%q].orValue('')", swarmv1.SwarmLabel)},
			{Name: "refs", Expression: "object.metadata.?ownerReferences.orValue([])"},
		},
		Validations: []admissionv1.Validation{
			{Expression: fmt.Sprintf("variables.swarm != '' && size(variables.refs) == 1 && variables.refs[0].apiVersion == %q && variables.refs[0].kind == 'Swarm' && "+
				"variables.refs[0].name == variables.swarm && variables.refs[0].?controller.orValue(false) && variables.refs[0].?blockOwnerDeletion.orValue(false)",
				swarmv1.SchemeGroupVersion.String()),
				Message: m("labelled " + swarmv1.SwarmLabel + "=<swarm> and owned (controller) by that Swarm alone")},
			{Expression: "!has(object.metadata.finalizers) && !has(object.metadata.generateName) && !object.?immutable.orValue(false)",
				Message: m("no finalizer, no generated name, not immutable")},
			{Expression: fmt.Sprintf("request.operation == 'CREATE' ? (object.metadata.labels.all(k, k == %q) && !has(object.metadata.annotations)) : "+
				"(object.metadata.?labels.orValue({}) == oldObject.metadata.?labels.orValue({}) && variables.refs == oldObject.metadata.?ownerReferences.orValue([]) && "+
				"object.metadata.?annotations.orValue({}) == oldObject.metadata.?annotations.orValue({}))", swarmv1.SwarmLabel),
				Message: m("created with the " + swarmv1.SwarmLabel + " label alone and no annotation; updated only when already its Swarm's, its labels, annotations and owner unchanged")},
		},
	}
}

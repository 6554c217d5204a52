package manifest

import (
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/admission"
	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
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
	name := WorkerPolicyName(namespace)
	fail := admissionv1.Fail
	pod := fmt.Sprintf("request.userInfo.extra[%q][0]", PodNameExtra)
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
			MatchConditions: []admissionv1.MatchCondition{{Name: "is-a-worker",
				Expression: fmt.Sprintf("request.userInfo.username == %q", "system:serviceaccount:"+namespace+":"+WorkerName)}},
			Validations: []admissionv1.Validation{
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
				{Expression: "request.resource.resource != 'pods' || (object.metadata.?finalizers.orValue([]) == oldObject.metadata.?finalizers.orValue([]) && " +
					"object.metadata.?ownerReferences.orValue([]) == oldObject.metadata.?ownerReferences.orValue([]))",
					Message: "a swarm worker may not change the finalizers or ownerReferences of its pod"},
				{Expression: fmt.Sprintf("request.resource.resource != 'leases' || request.operation == 'CREATE' || "+
					"object.metadata.?annotations[%[1]q].orValue('') == oldObject.metadata.?annotations[%[1]q].orValue('')", member.MinVersionAnnotation),
					Message: "a swarm worker may not change " + member.MinVersionAnnotation + " (the controller's fence)"},
			},
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

// onlyKeyChanged is a CEL expression: of metadata.<field>, no key but key
// itself (exactly: not one that merely begins like it) was added, changed
// or removed.
func onlyKeyChanged(field, key string) string {
	return fmt.Sprintf(`(has(object.metadata.%[1]s) ? object.metadata.%[1]s : {}).all(k, k == %[2]q || (has(oldObject.metadata.%[1]s) && k in oldObject.metadata.%[1]s && oldObject.metadata.%[1]s[k] == object.metadata.%[1]s[k])) && `+
		`(has(oldObject.metadata.%[1]s) ? oldObject.metadata.%[1]s : {}).all(k, k == %[2]q || (has(object.metadata.%[1]s) && k in object.metadata.%[1]s))`, field, key)
}

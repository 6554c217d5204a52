// Package admission builds the ValidatingAdmissionPolicies that confine a
// node agent (a DaemonSet pod) to its own Node. RBAC cannot: it grants
// "patch nodes" for every Node or for Nodes named in advance. The API server
// puts the node a pod's bound service-account token belongs to in the
// request's user info (NodeNameExtra); a policy compares it with the Node
// being written, and limits what the agent may change on it. Both node
// agents of slipway (`ops agent`, `update-operator agent`) use it.
package admission

import (
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeNameExtra is the user-info extra in which the API server names the
// node of a bound service-account token.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// NodeAgentPolicy says what one node agent may do to Nodes.
type NodeAgentPolicy struct {
	Name   string            // the policy's and its binding's name
	Labels map[string]string // on both objects
	// User is the agent's user name, e.g. system:serviceaccount:NS:SA.
	User string
	// Agent names the agent in messages, e.g. "the slipway agent".
	Agent string
	// LabelPrefixes and AnnotationPrefixes are the keys it may add, change or remove.
	LabelPrefixes, AnnotationPrefixes []string
	// MayCordon lets it change spec.unschedulable; nothing else in the spec may change.
	MayCordon bool
}

// Objects are the policy and its binding (deny on failure).
func (p NodeAgentPolicy) Objects() []any {
	return []any{p.Policy(), p.Binding()}
}

// Policy is the ValidatingAdmissionPolicy on Node updates by p.User.
func (p NodeAgentPolicy) Policy() *admissionv1.ValidatingAdmissionPolicy {
	fail := admissionv1.Fail
	return &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: p.Labels},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
				Operations: []admissionv1.OperationType{admissionv1.Update},
				Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes"}},
			}}}},
			MatchConditions: []admissionv1.MatchCondition{{Name: "is-the-agent", Expression: fmt.Sprintf("request.userInfo.username == %q", p.User)}},
			Validations:     p.validations(),
		},
	}
}

func (p NodeAgentPolicy) validations() []admissionv1.Validation {
	spec := admissionv1.Validation{Expression: "object.spec == oldObject.spec",
		Message: p.Agent + " may not change a Node's spec"}
	if p.MayCordon {
		spec = admissionv1.Validation{Expression: SpecUnchangedButUnschedulable,
			Message: p.Agent + " may change only spec.unschedulable (the cordon) of a Node's spec"}
	}
	return []admissionv1.Validation{
		{Expression: OwnNode, Message: p.Agent + " may change only the Node it runs on"},
		spec,
		{Expression: NodeMetadataFrozen, Message: p.Agent + " may change only labels and annotations of a Node's metadata (no owner reference, no finalizer)"},
		{Expression: OnlyKeysChanged("labels", p.LabelPrefixes...), Message: p.Agent + " may change only labels under " + strings.Join(p.LabelPrefixes, ", ")},
		{Expression: OnlyKeysChanged("annotations", p.AnnotationPrefixes...), Message: p.Agent + " may change only annotations under " + strings.Join(p.AnnotationPrefixes, ", ")},
	}
}

// Binding binds the policy cluster-wide with the Deny action.
func (p NodeAgentPolicy) Binding() *admissionv1.ValidatingAdmissionPolicyBinding {
	return &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: p.Labels},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: p.Name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
}

// OwnNode is a CEL expression: the Node written is the one named in the
// requester's bound token.
var OwnNode = fmt.Sprintf("%q in request.userInfo.extra && object.metadata.name == request.userInfo.extra[%q][0]", NodeNameExtra, NodeNameExtra)

// SpecUnchangedButUnschedulable is a CEL expression: of a Node's spec only
// unschedulable changed (taints, provider ID, pod CIDRs and every other
// field did not).
var SpecUnchangedButUnschedulable = FrozenExcept(".spec", "unschedulable")

// FrozenExcept is a CEL expression: no field of the object at path (under
// object and oldObject) was added, changed or removed but mutable. It
// names what may change, so a field it does not know (one a later
// Kubernetes adds) is frozen too.
func FrozenExcept(path string, mutable ...string) string {
	m := CELList(mutable)
	return fmt.Sprintf("dyn(object%[1]s).all(k, k in %[2]s || (k in dyn(oldObject%[1]s) && dyn(object%[1]s)[k] == dyn(oldObject%[1]s)[k])) && "+
		"dyn(oldObject%[1]s).all(k, k in %[2]s || k in dyn(object%[1]s))", path, m)
}

// NodeMetadataFrozen is a CEL expression: of a Node's metadata only the
// labels and annotations changed (and what the API server itself writes
// on every update). An owner reference would have the garbage collector
// delete the Node (and its pods with it); a finalizer would pin it; both
// are frozen, as is every other field.
var NodeMetadataFrozen = FrozenExcept(".metadata", "labels", "annotations", "managedFields", "resourceVersion", "generation")

// OnlyKeysChanged is a CEL expression: every key of metadata.<field>
// added, changed or removed starts with one of prefixes.
func OnlyKeysChanged(field string, prefixes ...string) string {
	allowed := make([]string, len(prefixes))
	for i, p := range prefixes {
		allowed[i] = fmt.Sprintf("k.startsWith(%q)", p)
	}
	ok := strings.Join(allowed, " || ")
	if ok == "" {
		ok = "false"
	}
	return fmt.Sprintf(`(has(object.metadata.%[1]s) ? object.metadata.%[1]s : {}).all(k, %[2]s || (has(oldObject.metadata.%[1]s) && k in oldObject.metadata.%[1]s && oldObject.metadata.%[1]s[k] == object.metadata.%[1]s[k])) && `+
		`(has(oldObject.metadata.%[1]s) ? oldObject.metadata.%[1]s : {}).all(k, %[2]s || (has(object.metadata.%[1]s) && k in object.metadata.%[1]s))`, field, ok)
}

package admission

import (
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// UserPolicy is a ValidatingAdmissionPolicy on the writes some users make
// to one resource: RBAC says which verbs they may use on it, the policy
// what the objects they write may hold (whose node, which shape).
type UserPolicy struct {
	Name   string            // the policy's and its binding's name
	Labels map[string]string // on both objects
	// Users are the user names the policy applies to; none: every user.
	Users []string
	// Namespace limits the policy to objects of that namespace ("": any).
	Namespace string
	// Group, Version, Resource and Operations say which writes it checks.
	Group, Version, Resource string
	Operations               []admissionv1.OperationType
	// Variables are named CEL expressions the validations use as variables.<name>.
	Variables []admissionv1.Variable
	// Validations must all hold (CEL), else the request is refused with the message.
	Validations []admissionv1.Validation
}

// Objects are the policy and its binding (deny on failure).
func (p UserPolicy) Objects() []any {
	return []any{p.Policy(), p.Binding()}
}

// Policy is the ValidatingAdmissionPolicy.
func (p UserPolicy) Policy() *admissionv1.ValidatingAdmissionPolicy {
	fail := admissionv1.Fail
	var conds []admissionv1.MatchCondition
	if len(p.Users) > 0 {
		quoted := make([]string, len(p.Users))
		for i, u := range p.Users {
			quoted[i] = fmt.Sprintf("%q", u)
		}
		conds = []admissionv1.MatchCondition{{Name: "is-a-slipway-component",
			Expression: "request.userInfo.username in [" + strings.Join(quoted, ", ") + "]"}}
	}
	return &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: p.Labels},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{NamespaceSelector: p.namespaceSelector(), ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
				Operations: p.Operations,
				Rule:       admissionv1.Rule{APIGroups: []string{p.Group}, APIVersions: []string{p.Version}, Resources: []string{p.Resource}},
			}}}},
			MatchConditions: conds,
			Variables:       p.Variables,
			Validations:     p.Validations,
		},
	}
}

func (p UserPolicy) namespaceSelector() *metav1.LabelSelector {
	if p.Namespace == "" {
		return nil
	}
	return &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": p.Namespace}}
}

// Binding binds the policy cluster-wide with the Deny action.
func (p UserPolicy) Binding() *admissionv1.ValidatingAdmissionPolicyBinding {
	return &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: p.Labels},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: p.Name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
}

// RequesterNode is a CEL expression: the node named in the requester's
// bound token, "" when it names none.
var RequesterNode = fmt.Sprintf("%[1]q in request.userInfo.extra && size(request.userInfo.extra[%[1]q]) == 1 ? request.userInfo.extra[%[1]q][0] : ''", NodeNameExtra)

// CELList renders strings as a CEL list literal.
func CELList(values []string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = fmt.Sprintf("%q", v)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

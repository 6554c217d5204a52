package webhook

import (
	"context"
	"errors"
	"testing"

	celgo "github.com/google/cel-go/cel"
	celtypes "github.com/google/cel-go/common/types"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
)

// The reference: a policy compiled and evaluated by the API server's own
// ValidatingAdmissionPolicy code (k8s.io/apiserver's composited compiler
// over its base environment, its match conditions and condition
// evaluator, as its compilePolicy and validator do). Only the tests link
// it; the differential test holds the webhook's own evaluation (cel.go)
// to it.

type reference struct {
	matcher matchconditions.Matcher
	checks  cel.ConditionEvaluator
}

func compileReference(t *testing.T, p *admissionregv1.ValidatingAdmissionPolicy) *reference {
	t.Helper()
	opt := cel.OptionalVariableDeclarations{HasParams: false, HasAuthorizer: true}
	compiler, err := cel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	vars := make([]cel.NamedExpressionAccessor, len(p.Spec.Variables))
	for i, v := range p.Spec.Variables {
		vars[i] = &refVariable{name: v.Name, expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(vars, opt, environment.StoredExpressions)
	validations := make([]cel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = &refValidation{expression: v.Expression, message: v.Message, reason: v.Reason}
	}
	r := &reference{checks: compiler.CompileCondition(validations, opt, environment.StoredExpressions)}
	matches := make([]cel.ExpressionAccessor, len(p.Spec.MatchConditions))
	for i := range p.Spec.MatchConditions {
		matches[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
	}
	mc := compiler.CompileCondition(matches, opt, environment.StoredExpressions)
	if err := errors.Join(append(r.checks.CompilationErrors(), mc.CompilationErrors()...)...); err != nil {
		t.Fatalf("policy %s: the API server's compiler: %v", p.Name, err)
	}
	if len(matches) > 0 {
		r.matcher = matchconditions.NewMatcher(mc, p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	return r
}

type refVariable struct{ name, expression string }

func (v *refVariable) GetName() string            { return v.name }
func (v *refVariable) GetExpression() string      { return v.expression }
func (v *refVariable) ReturnTypes() []*celgo.Type { return []*celgo.Type{celgo.AnyType, celgo.DynType} }

type refValidation struct {
	expression, message string
	reason              *metav1.StatusReason
}

func (v *refValidation) GetExpression() string      { return v.expression }
func (v *refValidation) ReturnTypes() []*celgo.Type { return []*celgo.Type{celgo.BoolType} }

// decide is the API server's decision on req (its user already with the
// node-name extra the webhook adds): allowed, or the message it denies with.
func (r *reference) decide(t *testing.T, req *admissionv1.AdmissionRequest) (bool, string) {
	t.Helper()
	obj, err := decodeObject(req.Object)
	if err != nil {
		t.Fatal(err)
	}
	old, err := decodeObject(req.OldObject)
	if err != nil {
		t.Fatal(err)
	}
	extra := map[string][]string{}
	for k, v := range req.UserInfo.Extra {
		extra[k] = v
	}
	info := &user.DefaultInfo{Name: req.UserInfo.Username, UID: req.UserInfo.UID, Groups: req.UserInfo.Groups, Extra: extra}
	gvk := schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind}
	gvr := schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	a := admission.NewAttributesRecord(obj, old, gvk, req.Namespace, req.Name, gvr, req.SubResource, admission.Operation(req.Operation), nil, false, info)
	va := &admission.VersionedAttributes{Attributes: a, VersionedKind: gvk, VersionedObject: obj, VersionedOldObject: old}
	ctx := context.Background()
	if r.matcher != nil {
		m := r.matcher.Match(ctx, va, nil, nil)
		if m.Error != nil {
			return false, "expression not evaluated"
		}
		if !m.Matches {
			return true, ""
		}
	}
	results, _, err := r.checks.ForInput(ctx, va, cel.CreateAdmissionRequest(a, metav1.GroupVersionResource(req.Resource), metav1.GroupVersionKind(req.Kind)),
		cel.OptionalVariableBindings{}, nil, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return false, "expression not evaluated"
	}
	for _, res := range results {
		if res.Error != nil {
			return false, "expression not evaluated"
		}
		if res.EvalResult == celtypes.True {
			continue
		}
		return false, res.ExpressionAccessor.(*refValidation).message
	}
	return true, ""
}

// decodeObject is decode as a runtime.Object (nil: none).
func decodeObject(raw runtime.RawExtension) (runtime.Object, error) {
	m, err := decode(raw)
	if m == nil || err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

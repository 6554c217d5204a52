package webhook

import (
	"errors"
	"fmt"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
)

// The policies' CEL, evaluated with cel-go directly rather than through
// k8s.io/apiserver's admission wrappers: linked into the one slipway
// binary, those wrappers' packages (feature gates, metrics registries,
// OpenAPI validation formats, audit) run their inits in every process,
// every node's agent included. The environment is the part of the API
// server's ValidatingAdmissionPolicy environment the webhook needs, with
// the same semantics: the variables object, oldObject, request, params,
// namespaceObject and variables; optional types; cross-type numeric
// comparisons; homogeneous aggregate literals; the extended string
// functions of version 2; and Kubernetes' list indexOf/lastIndexOf. A
// policy using any other Kubernetes CEL library (URLs, regex find,
// quantities, authorizer, ...) fails to compile, so the webhook refuses to
// start on it rather than evaluate it differently (TestEveryManifestPolicyCompiles),
// and a differential test holds the decisions to the API server's own
// evaluator (reference_test.go).

// perCallLimit bounds each expression's runtime cost, as the API server's
// per-call limit does (k8s.io/apiserver/pkg/apis/cel.PerCallLimit).
const perCallLimit = 1000000

// newEnv is the policies' CEL environment.
func newEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("object", cel.DynType),
		cel.Variable("oldObject", cel.DynType),
		cel.Variable("request", cel.DynType),
		cel.Variable("params", cel.DynType),
		cel.Variable("namespaceObject", cel.DynType),
		cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)),
		cel.OptionalTypes(),
		cel.CrossTypeNumericComparisons(true),
		cel.HomogeneousAggregateLiterals(),
		cel.DefaultUTCTimeZone(true),
		ext.Strings(ext.StringsVersion(2)),
		cel.Function("indexOf", cel.MemberOverload("list_a_index_of_int", []*cel.Type{cel.ListType(cel.TypeParamType("A")), cel.TypeParamType("A")},
			cel.IntType, cel.BinaryBinding(func(l, v ref.Val) ref.Val { return listIndex(l, v, false) }))),
		cel.Function("lastIndexOf", cel.MemberOverload("list_a_last_index_of_int", []*cel.Type{cel.ListType(cel.TypeParamType("A")), cel.TypeParamType("A")},
			cel.IntType, cel.BinaryBinding(func(l, v ref.Val) ref.Val { return listIndex(l, v, true) }))),
	)
}

// listIndex is the first (or last) index of v in list l, -1 when absent.
func listIndex(l, v ref.Val, last bool) ref.Val {
	lister, ok := l.(traits.Lister)
	if !ok {
		return types.MaybeNoSuchOverloadErr(l)
	}
	n := int64(lister.Size().(types.Int))
	found := types.Int(-1)
	for i := int64(0); i < n; i++ {
		if lister.Get(types.Int(i)).Equal(v) == types.True {
			found = types.Int(i)
			if !last {
				break
			}
		}
	}
	return found
}

// program is one compiled expression.
type program struct {
	expression string
	prg        cel.Program
}

// compileExpr compiles one expression of a policy; want is the type it
// must give (bool for validations and match conditions; nil: any).
func compileExpr(env *cel.Env, expr string, want *cel.Type) (program, error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return program{}, fmt.Errorf("compile %q: %w", expr, iss.Err())
	}
	if want != nil && !ast.OutputType().IsExactType(want) && !ast.OutputType().IsExactType(cel.DynType) {
		return program{}, fmt.Errorf("%q gives %s, want %s", expr, ast.OutputType(), want)
	}
	prg, err := env.Program(ast, cel.CostLimit(perCallLimit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return program{}, fmt.Errorf("program %q: %w", expr, err)
	}
	return program{expression: expr, prg: prg}, nil
}

// compiledPolicy is a policy ready to evaluate.
type compiledPolicy struct {
	variables   []namedProgram
	matches     []program
	validations []validationProgram
}

type namedProgram struct {
	name string
	program
}

type validationProgram struct {
	program
	message string
	reason  string
}

// compilePolicy compiles p's variables, match conditions and validations.
func compilePolicy(env *cel.Env, p *admissionregv1.ValidatingAdmissionPolicy) (*compiledPolicy, error) {
	c := &compiledPolicy{}
	var errs []error
	for _, v := range p.Spec.Variables {
		prg, err := compileExpr(env, v.Expression, nil)
		errs = append(errs, err)
		c.variables = append(c.variables, namedProgram{name: v.Name, program: prg})
	}
	for _, m := range p.Spec.MatchConditions {
		prg, err := compileExpr(env, m.Expression, cel.BoolType)
		errs = append(errs, err)
		c.matches = append(c.matches, prg)
	}
	for _, v := range p.Spec.Validations {
		prg, err := compileExpr(env, v.Expression, cel.BoolType)
		errs = append(errs, err)
		vp := validationProgram{program: prg, message: v.Message}
		if v.Reason != nil {
			vp.reason = string(*v.Reason)
		}
		c.validations = append(c.validations, vp)
	}
	return c, errors.Join(errs...)
}

// input is what one request gives the expressions.
type input struct {
	object, oldObject, request any // unstructured values; nil: null
}

// evaluate runs the policy on in: the variables in their order (each sees
// those before it; one that fails is an error only where it is used, as
// the API server's lazy variables are), then the match conditions, then
// the validations. It returns whether the request matches, and the first
// validation not true with its error (nil when it evaluated to false).
func (c *compiledPolicy) evaluate(in input) (matched bool, failed *validationProgram, err error) {
	vars := map[ref.Val]ref.Val{}
	act := map[string]any{
		"object": orNull(in.object), "oldObject": orNull(in.oldObject), "request": orNull(in.request),
		"params": types.NullValue, "namespaceObject": types.NullValue,
		"variables": types.NewRefValMap(types.DefaultTypeAdapter, vars),
	}
	for _, v := range c.variables {
		val, _, err := v.prg.Eval(act)
		if err != nil {
			val = types.WrapErr(fmt.Errorf("variable %s: %w", v.name, err))
		}
		vars[types.String(v.name)] = val
		act["variables"] = types.NewRefValMap(types.DefaultTypeAdapter, vars)
	}
	for _, m := range c.matches {
		val, _, err := m.prg.Eval(act)
		if err != nil {
			return false, nil, fmt.Errorf("match condition %q: %w", m.expression, err)
		}
		if val != types.True {
			return false, nil, nil
		}
	}
	for i := range c.validations {
		v := &c.validations[i]
		val, _, err := v.prg.Eval(act)
		if err != nil {
			return true, v, fmt.Errorf("expression '%s' resulted in error: %w", v.expression, err)
		}
		if val != types.True {
			return true, v, nil
		}
	}
	return true, nil, nil
}

func orNull(v any) any {
	if v == nil {
		return types.NullValue
	}
	return v
}

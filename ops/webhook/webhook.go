// Package webhook enforces slipway's ValidatingAdmissionPolicies on API
// servers that cannot: Kubernetes before 1.30 (the last k3os releases carry
// k3s 1.22 and 1.23) has no ValidatingAdmissionPolicy v1 and puts no node
// name in a bound service-account token. The Server answers the API
// server's validating webhook calls by evaluating the very policies the
// manifest generates, with the API server's own CEL admission code
// (k8s.io/apiserver's validating policy validator), so the webhook and the
// policies cannot drift apart.
//
// The node a request comes from is what a 1.30 server would put in the
// request's user info (authentication.kubernetes.io/node-name): when the
// API server gives none, the Server reads it from the pod the token is
// bound to (the pod-name and pod-uid extras every bound token carries since
// Kubernetes 1.22), checking that pod's UID and ServiceAccount, and adds
// it before the policies run.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	celgo "github.com/google/cel-go/cel"
	celtypes "github.com/google/cel-go/common/types"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
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

// User-info extras a bound service-account token carries.
const (
	NodeNameExtra = "authentication.kubernetes.io/node-name" // Kubernetes 1.30+
	PodNameExtra  = "authentication.kubernetes.io/pod-name"  // 1.22+
	PodUIDExtra   = "authentication.kubernetes.io/pod-uid"   // 1.22+
)

// PathPrefix is where the Server answers for a policy: PathPrefix + policy name.
const PathPrefix = "/validate/"

// PodGetter reads a pod (a client-go PodInterface's Get, per namespace).
type PodGetter func(ctx context.Context, namespace, name string) (*corev1.Pod, error)

// Server answers AdmissionReview requests for a set of policies.
type Server struct {
	policies map[string]*compiled
	pods     PodGetter
	log      *slog.Logger
}

type compiled struct {
	policy  *admissionregv1.ValidatingAdmissionPolicy
	matcher matchconditions.Matcher // nil: no match conditions
	checks  cel.ConditionEvaluator  // the validations, in order
}

// New compiles policies. pods reads the pod a token is bound to (the
// Server's ServiceAccount needs get on pods in the agent's namespace).
func New(policies []*admissionregv1.ValidatingAdmissionPolicy, pods PodGetter, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{policies: map[string]*compiled{}, pods: pods, log: log}
	for _, p := range policies {
		if p.Spec.ParamKind != nil {
			return nil, fmt.Errorf("policy %s has a paramKind: the webhook evaluates only policies without parameters", p.Name)
		}
		if _, dup := s.policies[p.Name]; dup {
			return nil, fmt.Errorf("policy %s given twice", p.Name)
		}
		c, err := compile(p)
		if err != nil {
			return nil, fmt.Errorf("compile policy %s: %w", p.Name, err)
		}
		s.policies[p.Name] = c
	}
	return s, nil
}

// compile does what the API server's ValidatingAdmissionPolicy plugin does
// with p (its compilePolicy): one composited compiler over the base
// environment holding the policy's variables, its match conditions and its
// validations, authorizer declared.
func compile(p *admissionregv1.ValidatingAdmissionPolicy) (*compiled, error) {
	for _, v := range p.Spec.Validations {
		if v.MessageExpression != "" {
			return nil, fmt.Errorf("validation %q has a messageExpression, which the webhook does not evaluate: give it a message", v.Expression)
		}
	}
	if len(p.Spec.AuditAnnotations) > 0 {
		return nil, errors.New("the webhook does not write audit annotations: the policy must have none")
	}
	opt := cel.OptionalVariableDeclarations{HasParams: false, HasAuthorizer: true}
	compiler, err := cel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return nil, err
	}
	vars := make([]cel.NamedExpressionAccessor, len(p.Spec.Variables))
	for i, v := range p.Spec.Variables {
		vars[i] = &variable{name: v.Name, expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(vars, opt, environment.StoredExpressions)
	validations := make([]cel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = &validation{expression: v.Expression, message: v.Message, reason: v.Reason}
	}
	c := &compiled{policy: p, checks: compiler.CompileCondition(validations, opt, environment.StoredExpressions)}
	matches := compiler.CompileCondition(matchAccessors(p), opt, environment.StoredExpressions)
	// The API server reports a bad expression only when it runs; fail at start instead.
	if err := errors.Join(append(c.checks.CompilationErrors(), matches.CompilationErrors()...)...); err != nil {
		return nil, err
	}
	if len(p.Spec.MatchConditions) > 0 {
		c.matcher = matchconditions.NewMatcher(compiler.CompileCondition(matchAccessors(p), opt, environment.StoredExpressions),
			p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	return c, nil
}

// variable and validation are a policy's expressions as the CEL compiler takes them.
type variable struct{ name, expression string }

func (v *variable) GetName() string            { return v.name }
func (v *variable) GetExpression() string      { return v.expression }
func (v *variable) ReturnTypes() []*celgo.Type { return []*celgo.Type{celgo.AnyType, celgo.DynType} }

type validation struct {
	expression, message string
	reason              *metav1.StatusReason
}

func (v *validation) GetExpression() string      { return v.expression }
func (v *validation) ReturnTypes() []*celgo.Type { return []*celgo.Type{celgo.BoolType} }

func matchAccessors(p *admissionregv1.ValidatingAdmissionPolicy) []cel.ExpressionAccessor {
	out := make([]cel.ExpressionAccessor, len(p.Spec.MatchConditions))
	for i := range p.Spec.MatchConditions {
		out[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
	}
	return out
}

// ServeHTTP answers one AdmissionReview (v1) for the policy named by the path.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
	p := s.policies[name]
	if !ok || p == nil {
		http.Error(w, fmt.Sprintf("no policy at %s: the webhook answers at %s<policy name>", r.URL.Path, PathPrefix), http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, "read the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("the body is not an admission.k8s.io/v1 AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	resp := s.Review(r.Context(), p, review.Request)
	out := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Response: resp}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(out); err != nil {
		s.log.Error("write the admission response", "policy", name, "err", err)
	}
}

// Review decides one request against policy p: allowed unless a validation
// denies it or cannot be evaluated (the policies fail closed).
func (s *Server) Review(ctx context.Context, p *compiled, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	deny := func(code int32, reason metav1.StatusReason, msg string) *admissionv1.AdmissionResponse {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg}
		return resp
	}
	attrs, err := s.attributes(ctx, req)
	if err != nil {
		s.log.Warn("admission refused: the request cannot be read", "policy", p.policy.Name, "user", req.UserInfo.Username, "err", err)
		return deny(http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf("ValidatingAdmissionPolicy '%s' (served by slipway's webhook) denied request: %v", p.policy.Name, err))
	}
	d := p.decide(ctx, attrs, req)
	if d.allowed {
		return resp
	}
	s.log.Info("admission denied", "policy", p.policy.Name, "user", req.UserInfo.Username,
		"resource", req.Resource.Resource, "namespace", req.Namespace, "name", req.Name, "message", d.message)
	code := int32(http.StatusUnprocessableEntity)
	if d.reason == metav1.StatusReasonForbidden {
		code = http.StatusForbidden
	}
	return deny(code, d.reason, fmt.Sprintf("ValidatingAdmissionPolicy '%s' (served by slipway's webhook) denied request: %s", p.policy.Name, d.message))
}

// decision is a policy's answer to one request.
type decision struct {
	allowed bool
	reason  metav1.StatusReason
	message string
}

// decide evaluates the policy as the API server's validator does: not
// matched by its match conditions, it admits; else the first validation
// that is false denies with its message, and one that cannot be evaluated
// denies (the policies fail closed).
func (p *compiled) decide(ctx context.Context, attrs *admission.VersionedAttributes, req *admissionv1.AdmissionRequest) decision {
	failed := func(err error) decision {
		return decision{reason: metav1.StatusReasonInvalid, message: "expression not evaluated: " + err.Error()}
	}
	if p.matcher != nil {
		m := p.matcher.Match(ctx, attrs, nil, nil)
		if m.Error != nil {
			return failed(m.Error)
		}
		if !m.Matches {
			return decision{allowed: true}
		}
	}
	gvr := metav1.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	gvk := metav1.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind}
	results, _, err := p.checks.ForInput(ctx, attrs, cel.CreateAdmissionRequest(attrs.Attributes, gvr, gvk),
		cel.OptionalVariableBindings{}, nil, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return failed(err)
	}
	for _, r := range results {
		v, _ := r.ExpressionAccessor.(*validation)
		if r.Error != nil {
			return failed(r.Error)
		}
		if r.EvalResult == celtypes.True {
			continue
		}
		d := decision{reason: metav1.StatusReasonInvalid, message: "failed expression: " + r.ExpressionAccessor.GetExpression()}
		if v != nil && v.reason != nil {
			d.reason = *v.reason
		}
		if v != nil && v.message != "" {
			d.message = v.message
		}
		return d
	}
	return decision{allowed: true}
}

// attributes turns the request into what the API server's policy plugin sees.
func (s *Server) attributes(ctx context.Context, req *admissionv1.AdmissionRequest) (*admission.VersionedAttributes, error) {
	obj, err := decode(req.Object)
	if err != nil {
		return nil, fmt.Errorf("decode the object: %w", err)
	}
	old, err := decode(req.OldObject)
	if err != nil {
		return nil, fmt.Errorf("decode the old object: %w", err)
	}
	info, err := s.userInfo(ctx, req.UserInfo)
	if err != nil {
		return nil, err
	}
	gvk := schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind}
	gvr := schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	dryRun := req.DryRun != nil && *req.DryRun
	var opts runtime.Object
	if o, err := decode(req.Options); err == nil && o != nil {
		opts = o
	}
	a := admission.NewAttributesRecord(obj, old, gvk, req.Namespace, req.Name, gvr, req.SubResource,
		admission.Operation(req.Operation), opts, dryRun, info)
	va := &admission.VersionedAttributes{Attributes: a, VersionedKind: gvk}
	if obj != nil {
		va.VersionedObject = obj
	}
	if old != nil {
		va.VersionedOldObject = old
	}
	return va, nil
}

func decode(raw runtime.RawExtension) (runtime.Object, error) {
	if len(raw.Raw) == 0 || string(raw.Raw) == "null" {
		return nil, nil
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw.Raw); err != nil {
		return nil, err
	}
	return u, nil
}

// userInfo is the requester as the policies expect to see it: with the
// node-name extra of its bound token. An API server older than 1.30 gives
// the token's pod (name and UID) but not its node: the pod is read, it must
// be the very pod the token was issued for (same UID) and run as the
// token's ServiceAccount, and its spec.nodeName becomes the node-name
// extra. A requester whose token names no pod, or a pod that cannot be
// read or is not the token's, gets no node (the policies then refuse what
// needs one).
func (s *Server) userInfo(ctx context.Context, in authenticationv1.UserInfo) (user.Info, error) {
	extra := make(map[string][]string, len(in.Extra)+1)
	for k, v := range in.Extra {
		extra[k] = append([]string(nil), v...)
	}
	info := &user.DefaultInfo{Name: in.Username, UID: in.UID, Groups: in.Groups, Extra: extra}
	if len(extra[NodeNameExtra]) > 0 || len(extra[PodNameExtra]) != 1 {
		return info, nil
	}
	ns, sa, ok := serviceAccount(in.Username)
	if !ok {
		return info, nil
	}
	node, err := s.podNode(ctx, ns, sa, extra[PodNameExtra][0], first(extra[PodUIDExtra]))
	if err != nil {
		// No node, not a refusal: every policy that needs the node then
		// refuses (a node agent gets nothing), and the writes of everyone
		// else (any pod's ServiceAccount in a namespace whose pods this
		// webhook may not read) are not held up.
		s.log.Debug("no node for the requester", "user", in.Username, "err", err)
		return info, nil
	}
	if node != "" {
		extra[NodeNameExtra] = []string{node}
	}
	return info, nil
}

// podNode is the node of pod ns/name, after checking it is the pod the
// token was bound to (uid) and runs as ServiceAccount sa.
func (s *Server) podNode(ctx context.Context, ns, sa, name, uid string) (string, error) {
	if s.pods == nil {
		return "", errors.New("the webhook cannot read pods, so it cannot tell the requester's node")
	}
	pod, err := s.pods(ctx, ns, name)
	if err != nil {
		return "", fmt.Errorf("read the pod %s/%s the requester's token is bound to (to learn its node): %w", ns, name, err)
	}
	if uid == "" || string(pod.UID) != uid {
		return "", fmt.Errorf("the requester's token is bound to pod %s/%s UID %q, which no longer exists", ns, name, uid)
	}
	if got := podServiceAccount(pod); got != sa {
		return "", fmt.Errorf("pod %s/%s runs as ServiceAccount %q, not the requester's %q", ns, name, got, sa)
	}
	return pod.Spec.NodeName, nil
}

func podServiceAccount(pod *corev1.Pod) string {
	if pod.Spec.ServiceAccountName == "" {
		return "default"
	}
	return pod.Spec.ServiceAccountName
}

// serviceAccount splits system:serviceaccount:NS:NAME.
func serviceAccount(username string) (ns, name string, ok bool) {
	rest, ok := strings.CutPrefix(username, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	ns, name, ok = strings.Cut(rest, ":")
	return ns, name, ok && ns != "" && name != ""
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

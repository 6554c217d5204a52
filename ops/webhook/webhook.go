// Package webhook enforces slipway's ValidatingAdmissionPolicies on API
// servers that cannot: Kubernetes before 1.30 (the last k3os releases carry
// k3s 1.22 and 1.23) has no ValidatingAdmissionPolicy v1 and puts no node
// name in a bound service-account token. The Server answers the API
// server's validating webhook calls by evaluating the very policies the
// manifest generates, with the CEL environment of the API server's
// ValidatingAdmissionPolicies (cel.go), so the webhook and the policies
// cannot drift apart.
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

	"github.com/google/cel-go/cel"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
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
	policy *admissionregv1.ValidatingAdmissionPolicy
	c      *compiledPolicy
}

// New compiles policies. pods reads the pod a token is bound to (the
// Server's ServiceAccount needs get on pods in the agent's namespace).
func New(policies []*admissionregv1.ValidatingAdmissionPolicy, pods PodGetter, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	env, err := newEnv()
	if err != nil {
		return nil, fmt.Errorf("the policies' CEL environment: %w", err)
	}
	s := &Server{policies: map[string]*compiled{}, pods: pods, log: log}
	for _, p := range policies {
		if p.Spec.ParamKind != nil {
			return nil, fmt.Errorf("policy %s has a paramKind: the webhook evaluates only policies without parameters", p.Name)
		}
		if _, dup := s.policies[p.Name]; dup {
			return nil, fmt.Errorf("policy %s given twice", p.Name)
		}
		c, err := compile(env, p)
		if err != nil {
			return nil, fmt.Errorf("compile policy %s: %w", p.Name, err)
		}
		s.policies[p.Name] = c
	}
	return s, nil
}

// compile checks that the webhook can evaluate p as the API server would
// (no messageExpression, no audit annotation) and compiles its variables,
// match conditions and validations. The API server reports a bad
// expression only when it runs; the webhook fails at start instead.
func compile(env *cel.Env, p *admissionregv1.ValidatingAdmissionPolicy) (*compiled, error) {
	for _, v := range p.Spec.Validations {
		if v.MessageExpression != "" {
			return nil, fmt.Errorf("validation %q has a messageExpression, which the webhook does not evaluate: give it a message", v.Expression)
		}
	}
	if len(p.Spec.AuditAnnotations) > 0 {
		return nil, errors.New("the webhook does not write audit annotations: the policy must have none")
	}
	c, err := compilePolicy(env, p)
	if err != nil {
		return nil, err
	}
	return &compiled{policy: p, c: c}, nil
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
	in, err := s.input(ctx, req)
	if err != nil {
		s.log.Warn("admission refused: the request cannot be read", "policy", p.policy.Name, "user", req.UserInfo.Username, "err", err)
		return deny(http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf("ValidatingAdmissionPolicy '%s' (served by slipway's webhook) denied request: %v", p.policy.Name, err))
	}
	d := p.decide(in)
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
// (or a match condition that cannot) denies (the policies fail closed).
func (p *compiled) decide(in input) decision {
	matched, v, err := p.c.evaluate(in)
	if err != nil {
		return decision{reason: metav1.StatusReasonInvalid, message: "expression not evaluated: " + err.Error()}
	}
	if !matched || v == nil {
		return decision{allowed: true}
	}
	d := decision{reason: metav1.StatusReasonInvalid, message: "failed expression: " + v.expression}
	if v.reason != "" {
		d.reason = metav1.StatusReason(v.reason)
	}
	if v.message != "" {
		d.message = v.message
	}
	return d
}

// input turns the request into what the policies' expressions see:
// object and oldObject as stored, and request as the API server's
// ValidatingAdmissionPolicy plugin builds it (its CreateAdmissionRequest:
// no objects, the requester with the node-name extra).
func (s *Server) input(ctx context.Context, req *admissionv1.AdmissionRequest) (input, error) {
	var in input
	obj, err := decode(req.Object)
	if err != nil {
		return in, fmt.Errorf("decode the object: %w", err)
	}
	old, err := decode(req.OldObject)
	if err != nil {
		return in, fmt.Errorf("decode the old object: %w", err)
	}
	info, err := s.userInfo(ctx, req.UserInfo)
	if err != nil {
		return in, err
	}
	dryRun := req.DryRun != nil && *req.DryRun
	r := &admissionv1.AdmissionRequest{Kind: req.Kind, Resource: req.Resource, SubResource: req.SubResource,
		RequestKind: req.RequestKind, RequestResource: req.RequestResource, RequestSubResource: req.RequestSubResource,
		Name: req.Name, Namespace: req.Namespace, Operation: req.Operation, UserInfo: info, DryRun: &dryRun, Options: req.Options}
	if r.RequestKind == nil {
		r.RequestKind = &r.Kind
	}
	if r.RequestResource == nil {
		r.RequestResource = &r.Resource
	}
	request, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r)
	if err != nil {
		return in, fmt.Errorf("convert the request: %w", err)
	}
	in.request = request
	if obj != nil {
		in.object = obj
	}
	if old != nil {
		in.oldObject = old
	}
	return in, nil
}

// decode is an object of the request as unstructured data (nil: none).
func decode(raw runtime.RawExtension) (map[string]any, error) {
	if len(raw.Raw) == 0 || string(raw.Raw) == "null" {
		return nil, nil
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw.Raw); err != nil {
		return nil, err
	}
	return u.Object, nil
}

// userInfo is the requester as the policies expect to see it: with the
// node-name extra of its bound token. An API server older than 1.30 gives
// the token's pod (name and UID) but not its node: the pod is read, it must
// be the very pod the token was issued for (same UID) and run as the
// token's ServiceAccount, and its spec.nodeName becomes the node-name
// extra. A requester whose token names no pod, or a pod that cannot be
// read or is not the token's, gets no node (the policies then refuse what
// needs one).
func (s *Server) userInfo(ctx context.Context, in authenticationv1.UserInfo) (authenticationv1.UserInfo, error) {
	extra := make(map[string]authenticationv1.ExtraValue, len(in.Extra)+1)
	for k, v := range in.Extra {
		extra[k] = append(authenticationv1.ExtraValue(nil), v...)
	}
	info := authenticationv1.UserInfo{Username: in.Username, UID: in.UID, Groups: in.Groups, Extra: extra}
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
		extra[NodeNameExtra] = authenticationv1.ExtraValue{node}
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

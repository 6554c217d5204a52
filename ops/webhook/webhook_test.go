package webhook

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/manifest"
)

// TestEveryManifestPolicyCompiles: whatever the manifest's policies become,
// the webhook compiles them all (a policy it could not evaluate would
// refuse every request it matches).
func TestEveryManifestPolicyCompiles(t *testing.T) {
	for _, o := range []manifest.Options{{}, {Namespace: "x", MirrorDirs: []string{"/mirror"}, JobImages: []string{"a/b:c"}, TokenSecrets: []string{"t"}}} {
		ps := manifest.Policies(o)
		if len(ps) == 0 {
			t.Fatal("the manifest has no policies")
		}
		if _, err := New(ps, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNewRefusesWhatItCannotEvaluate(t *testing.T) {
	for name, p := range map[string]admissionregv1.ValidatingAdmissionPolicySpec{
		"bad CEL":           {Validations: []admissionregv1.Validation{{Expression: "object.metadata.name ==", Message: "m"}}},
		"messageExpression": {Validations: []admissionregv1.Validation{{Expression: "true", MessageExpression: "'m'"}}},
		"parameters":        {ParamKind: &admissionregv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}},
		"audit annotations": {AuditAnnotations: []admissionregv1.AuditAnnotation{{Key: "k", ValueExpression: "'v'"}}},
	} {
		if _, err := New([]*admissionregv1.ValidatingAdmissionPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: p}}, nil, nil); err == nil {
			t.Errorf("%s: New admitted a policy it cannot evaluate as the API server would", name)
		}
	}
}

// TestNodeFromTheBoundPod is the table of how the requester's node is
// learnt when the server gives no node claim.
func TestNodeFromTheBoundPod(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-x", Namespace: "ns", UID: "u1"},
		Spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: "slipway-agent"}}
	s := &Server{log: slog.New(slog.DiscardHandler), pods: func(_ context.Context, ns, name string) (*corev1.Pod, error) {
		if ns == pod.Namespace && name == pod.Name {
			return pod, nil
		}
		return nil, &notFound{}
	}}
	user := "system:serviceaccount:ns:slipway-agent"
	for _, c := range []struct {
		name string
		in   authenticationv1.UserInfo
		node string
	}{
		{"the server's own claim stays", authenticationv1.UserInfo{Username: user, Extra: map[string]authenticationv1.ExtraValue{NodeNameExtra: {"n9"}, PodNameExtra: {"agent-x"}, PodUIDExtra: {"u1"}}}, "n9"},
		{"bound pod gives its node", authenticationv1.UserInfo{Username: user, Extra: map[string]authenticationv1.ExtraValue{PodNameExtra: {"agent-x"}, PodUIDExtra: {"u1"}}}, "n1"},
		{"another pod of that name", authenticationv1.UserInfo{Username: user, Extra: map[string]authenticationv1.ExtraValue{PodNameExtra: {"agent-x"}, PodUIDExtra: {"u0"}}}, ""},
		{"a pod of another ServiceAccount", authenticationv1.UserInfo{Username: "system:serviceaccount:ns:other", Extra: map[string]authenticationv1.ExtraValue{PodNameExtra: {"agent-x"}, PodUIDExtra: {"u1"}}}, ""},
		{"pod gone", authenticationv1.UserInfo{Username: user, Extra: map[string]authenticationv1.ExtraValue{PodNameExtra: {"agent-y"}, PodUIDExtra: {"u1"}}}, ""},
		{"no pod claim", authenticationv1.UserInfo{Username: user}, ""},
		{"not a ServiceAccount", authenticationv1.UserInfo{Username: "alice", Extra: map[string]authenticationv1.ExtraValue{PodNameExtra: {"agent-x"}, PodUIDExtra: {"u1"}}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			info, err := s.userInfo(context.Background(), c.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := first(info.Extra[NodeNameExtra]); got != c.node {
				t.Errorf("node %q, want %q", got, c.node)
			}
		})
	}
}

type notFound struct{}

func (*notFound) Error() string { return "not found" }

// TestReviewDeniesWithThePolicyMessage runs one policy of the manifest on a
// request as the API server would send it.
func TestReviewDeniesWithThePolicyMessage(t *testing.T) {
	o := manifest.Options{Namespace: "ns"}
	s, err := New(manifest.Policies(o), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	name := manifest.AgentName + "-leases-ns"
	p := s.policies[name]
	if p == nil {
		t.Fatalf("no policy %s", name)
	}
	lease := func(n string) runtime.RawExtension {
		return runtime.RawExtension{Raw: []byte(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"slipway-agent-` + n + `","namespace":"ns"},"spec":{"holderIdentity":"` + n + `"}}`)}
	}
	req := func(n string) *admissionv1.AdmissionRequest {
		return &admissionv1.AdmissionRequest{UID: types.UID("r"), Operation: admissionv1.Create, Namespace: "ns", Name: "slipway-agent-" + n,
			Kind:     metav1.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"},
			Resource: metav1.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
			UserInfo: authenticationv1.UserInfo{Username: manifest.AgentUser("ns"), Extra: map[string]authenticationv1.ExtraValue{NodeNameExtra: {"n1"}}},
			Object:   lease(n)}
	}
	if r := s.Review(context.Background(), p, req("n1")); !r.Allowed {
		t.Errorf("own heartbeat refused: %+v", r.Result)
	}
	r := s.Review(context.Background(), p, req("n2"))
	if r.Allowed || !strings.Contains(r.Result.Message, "its own node's heartbeat Lease") {
		t.Errorf("another node's heartbeat: %+v, want refused with the policy's message", r.Result)
	}
	other := req("n2")
	other.UserInfo.Username = "someone-else"
	if r := s.Review(context.Background(), p, other); !r.Allowed {
		t.Errorf("a user the policy does not match was refused: %+v", r.Result)
	}
}

package testenv

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestPodTokenCarriesThePodsNode: a token from PodToken authenticates as the
// pod's ServiceAccount with the pod's and its node's names in the user info,
// the claims admission policies confine node components by.
func TestPodTokenCarriesThePodsNode(t *testing.T) {
	env := Need(t, cluster)
	cs := clientset(t)
	ctx := context.Background()
	ns, node := "token-test", env.Nodes[1]
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-x"}, Spec: podTemplate("agent").Spec}
	pod.Spec.ServiceAccountName, pod.Spec.NodeName = "agent", node
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := PodToken(ctx, env.Config, ns, "agent-x")
	if err != nil {
		t.Fatal(err)
	}
	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ui := review.Status.UserInfo
	if want := "system:serviceaccount:" + ns + ":agent"; ui.Username != want {
		t.Errorf("user %q, want %q", ui.Username, want)
	}
	if got := ui.Extra[NodeNameExtra]; len(got) != 1 || got[0] != node {
		t.Errorf("node-name claim %v, want [%s]", got, node)
	}
	if got := ui.Extra[PodNameExtra]; len(got) != 1 || got[0] != "agent-x" {
		t.Errorf("pod-name claim %v, want [agent-x]", got)
	}
}

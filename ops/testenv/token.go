package testenv

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// PodToken returns a client config that authenticates with the token the
// kubelet would mount into pod ns/podName: a TokenRequest for the pod's
// ServiceAccount, bound to the pod. The API server puts the pod's name and
// UID, and its node's name and UID when the pod is bound to one, into the
// token's claims, and from them into the request's user info (NodeNameExtra,
// PodNameExtra), exactly as for a real node's component. Attack tests use it
// to act as a component on one node with nothing but what that node holds.
//
// The pod must exist (it may be one kwok runs, or one created only to hold
// the identity) and name its ServiceAccount in spec.serviceAccountName.
func PodToken(ctx context.Context, admin *rest.Config, ns, podName string) (*rest.Config, error) {
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return nil, fmt.Errorf("client for the token request: %w", err)
	}
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read pod %s/%s to bind its token: %w", ns, podName, err)
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	expiry := int64(3600)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &expiry,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("request a token of %s/%s bound to pod %s: %w", ns, sa, podName, err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}

// PodNameExtra is the user-info extra in which the API server names the pod
// a bound service-account token belongs to.
const PodNameExtra = "authentication.kubernetes.io/pod-name"

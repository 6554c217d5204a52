package kube

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/gentype"
)

// Secrets is the client of the Secrets in namespace.
func (g CoreV1) Secrets(namespace string) *Client[*corev1.Secret, *corev1.SecretList] {
	return gentype.NewClientWithList("secrets", g.rest, ParameterCodec, namespace,
		func() *corev1.Secret { return &corev1.Secret{} }, func() *corev1.SecretList { return &corev1.SecretList{} },
		gentype.PrefersProtobuf[*corev1.Secret]())
}

// Package kube is a typed Kubernetes client over only the API groups slipway
// uses: core/v1, apps/v1, batch/v1, coordination/v1, policy/v1 and apiextensions/v1.
//
// client-go's kubernetes clientset (and everything that imports its scheme:
// informers, discovery, leader election, the events API) registers every API
// group of Kubernetes, thousands of types, when the program starts. Linking
// and initialising that scheme cost about a third of every agent's resident
// memory (the binary's pages it touches: an idle stripped binary shows
// 33 MiB RSS with it, 22 MiB without), for types slipway never reads.
//
// The clients here are client-go's own generic ones (gentype) over rest
// clients whose scheme holds just the groups above, so call sites read like
// client-go's (c.CoreV1().Nodes().Get(...)).
package kube

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// Scheme holds the API groups this package's clients speak.
var Scheme = runtime.NewScheme()

// Codecs encodes and decodes the types of Scheme.
var Codecs = serializer.NewCodecFactory(Scheme)

// ParameterCodec encodes options (ListOptions, GetOptions, ...) as query parameters.
var ParameterCodec = runtime.NewParameterCodec(Scheme)

var schemeBuilder = runtime.NewSchemeBuilder(
	corev1.AddToScheme,
	appsv1.AddToScheme,
	batchv1.AddToScheme,
	coordinationv1.AddToScheme,
	policyv1.AddToScheme,
	apiextv1.AddToScheme,
)

// AddToScheme adds the API groups of Scheme to s (a caller's scheme that
// holds more types, such as an event recorder's).
var AddToScheme = schemeBuilder.AddToScheme

func init() {
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(AddToScheme(Scheme))
}

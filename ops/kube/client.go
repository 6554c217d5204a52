package kube

import (
	"context"
	"fmt"
	"net/http"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Clientset reaches the API groups of Scheme.
type Clientset struct {
	core, apps, batch, coordination, policy, apiext rest.Interface
}

// NewForConfig builds a Clientset for cfg. Like client-go's, its groups share
// one HTTP client and, when cfg sets a QPS, one rate limiter.
func NewForConfig(cfg *rest.Config) (*Clientset, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("build the HTTP client: %w", err)
	}
	return NewForConfigAndClient(cfg, httpClient)
}

// NewForConfigAndClient is NewForConfig over an existing HTTP client.
func NewForConfigAndClient(cfg *rest.Config, httpClient *http.Client) (*Clientset, error) {
	shared := *cfg
	if shared.RateLimiter == nil && shared.QPS > 0 {
		if shared.Burst <= 0 {
			return nil, fmt.Errorf("burst must be positive when QPS is set (QPS %v)", shared.QPS)
		}
		shared.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(shared.QPS, shared.Burst)
	}
	c := &Clientset{}
	groups := []struct {
		into    *rest.Interface
		gv      schema.GroupVersion
		apiPath string
	}{
		{&c.core, corev1.SchemeGroupVersion, "/api"},
		{&c.apps, appsv1.SchemeGroupVersion, "/apis"},
		{&c.batch, batchv1.SchemeGroupVersion, "/apis"},
		{&c.coordination, coordinationv1.SchemeGroupVersion, "/apis"},
		{&c.policy, policyv1.SchemeGroupVersion, "/apis"},
		{&c.apiext, apiextv1.SchemeGroupVersion, "/apis"},
	}
	for _, g := range groups {
		rc, err := restClientFor(&shared, httpClient, g.gv, g.apiPath)
		if err != nil {
			return nil, fmt.Errorf("build the %s client: %w", g.gv, err)
		}
		*g.into = rc
	}
	return c, nil
}

// restClientFor is a rest client for one group version of Scheme.
func restClientFor(cfg *rest.Config, httpClient *http.Client, gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
	c := *cfg
	c.GroupVersion = &gv
	c.APIPath = apiPath
	c.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(Scheme, Codecs).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientForConfigAndClient(&c, httpClient)
}

// CoreV1 is the core/v1 API group.
func (c *Clientset) CoreV1() CoreV1 { return CoreV1{c.core} }

// AppsV1 is the apps/v1 API group.
func (c *Clientset) AppsV1() AppsV1 { return AppsV1{c.apps} }

// BatchV1 is the batch/v1 API group.
func (c *Clientset) BatchV1() BatchV1 { return BatchV1{c.batch} }

// CoordinationV1 is the coordination.k8s.io/v1 API group.
func (c *Clientset) CoordinationV1() CoordinationV1 { return CoordinationV1{c.coordination} }

// PolicyV1 is the policy/v1 API group.
func (c *Clientset) PolicyV1() PolicyV1 { return PolicyV1{c.policy} }

// ApiextensionsV1 is the apiextensions.k8s.io/v1 API group.
func (c *Clientset) ApiextensionsV1() ApiextensionsV1 { return ApiextensionsV1{c.apiext} }

// Client is the typed client of one resource (Get, List, Watch, Create,
// Update, UpdateStatus, Patch, Delete, DeleteCollection).
type Client[T Object, L runtime.Object] = gentype.ClientWithList[T, L]

// Object is a Kubernetes object with metadata.
type Object interface {
	runtime.Object
	metav1.Object
}

// CoreV1 is the core/v1 API group.
type CoreV1 struct{ rest rest.Interface }

// RESTClient is the group's rest client.
func (g CoreV1) RESTClient() rest.Interface { return g.rest }

// Nodes is the client of Nodes.
func (g CoreV1) Nodes() *Client[*corev1.Node, *corev1.NodeList] {
	return gentype.NewClientWithList("nodes", g.rest, ParameterCodec, "",
		func() *corev1.Node { return &corev1.Node{} }, func() *corev1.NodeList { return &corev1.NodeList{} },
		gentype.PrefersProtobuf[*corev1.Node]())
}

// Pods is the client of the Pods in namespace ("" = all namespaces).
func (g CoreV1) Pods(namespace string) Pods {
	return Pods{gentype.NewClientWithList("pods", g.rest, ParameterCodec, namespace,
		func() *corev1.Pod { return &corev1.Pod{} }, func() *corev1.PodList { return &corev1.PodList{} },
		gentype.PrefersProtobuf[*corev1.Pod]())}
}

// ConfigMaps is the client of the ConfigMaps in namespace ("" = all namespaces).
func (g CoreV1) ConfigMaps(namespace string) *Client[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return gentype.NewClientWithList("configmaps", g.rest, ParameterCodec, namespace,
		func() *corev1.ConfigMap { return &corev1.ConfigMap{} }, func() *corev1.ConfigMapList { return &corev1.ConfigMapList{} },
		gentype.PrefersProtobuf[*corev1.ConfigMap]())
}

// Events is the client of the Events in namespace.
func (g CoreV1) Events(namespace string) *Client[*corev1.Event, *corev1.EventList] {
	return gentype.NewClientWithList("events", g.rest, ParameterCodec, namespace,
		func() *corev1.Event { return &corev1.Event{} }, func() *corev1.EventList { return &corev1.EventList{} },
		gentype.PrefersProtobuf[*corev1.Event]())
}

// Pods is the client of Pods, with their eviction subresource.
type Pods struct {
	*Client[*corev1.Pod, *corev1.PodList]
}

// EvictV1 asks the API server to evict a pod (POST to its eviction
// subresource), which it refuses while a PodDisruptionBudget forbids it.
// A refusal comes back at once: client-go would wait out its Retry-After
// (10 s while the budget is not computed) and ask again itself, up to ten
// times, where the caller's drain decides when to ask again and when to
// give up.
func (p Pods) EvictV1(ctx context.Context, eviction *policyv1.Eviction) error {
	return p.GetClient().Post().Namespace(p.GetNamespace()).Resource("pods").Name(eviction.Name).
		SubResource("eviction").Body(eviction).MaxRetries(0).Do(ctx).Error()
}

// BatchV1 is the batch/v1 API group.
type BatchV1 struct{ rest rest.Interface }

// Jobs is the client of the Jobs in namespace.
func (g BatchV1) Jobs(namespace string) *Client[*batchv1.Job, *batchv1.JobList] {
	return gentype.NewClientWithList("jobs", g.rest, ParameterCodec, namespace,
		func() *batchv1.Job { return &batchv1.Job{} }, func() *batchv1.JobList { return &batchv1.JobList{} },
		gentype.PrefersProtobuf[*batchv1.Job]())
}

// CoordinationV1 is the coordination.k8s.io/v1 API group.
type CoordinationV1 struct{ rest rest.Interface }

// Leases is the client of the Leases in namespace.
func (g CoordinationV1) Leases(namespace string) *Client[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return gentype.NewClientWithList("leases", g.rest, ParameterCodec, namespace,
		func() *coordinationv1.Lease { return &coordinationv1.Lease{} },
		func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} },
		gentype.PrefersProtobuf[*coordinationv1.Lease]())
}

// PolicyV1 is the policy/v1 API group.
type PolicyV1 struct{ rest rest.Interface }

// PodDisruptionBudgets is the client of the PodDisruptionBudgets in namespace.
func (g PolicyV1) PodDisruptionBudgets(namespace string) *Client[*policyv1.PodDisruptionBudget, *policyv1.PodDisruptionBudgetList] {
	return gentype.NewClientWithList("poddisruptionbudgets", g.rest, ParameterCodec, namespace,
		func() *policyv1.PodDisruptionBudget { return &policyv1.PodDisruptionBudget{} },
		func() *policyv1.PodDisruptionBudgetList { return &policyv1.PodDisruptionBudgetList{} },
		gentype.PrefersProtobuf[*policyv1.PodDisruptionBudget]())
}

// ApiextensionsV1 is the apiextensions.k8s.io/v1 API group.
type ApiextensionsV1 struct{ rest rest.Interface }

// CustomResourceDefinitions is the client of CustomResourceDefinitions.
func (g ApiextensionsV1) CustomResourceDefinitions() *Client[*apiextv1.CustomResourceDefinition, *apiextv1.CustomResourceDefinitionList] {
	return gentype.NewClientWithList("customresourcedefinitions", g.rest, ParameterCodec, "",
		func() *apiextv1.CustomResourceDefinition { return &apiextv1.CustomResourceDefinition{} },
		func() *apiextv1.CustomResourceDefinitionList { return &apiextv1.CustomResourceDefinitionList{} })
}

// AppsV1 is the apps/v1 API group.
type AppsV1 struct{ rest rest.Interface }

// DaemonSets is the client of the DaemonSets in namespace ("" = all namespaces).
func (g AppsV1) DaemonSets(namespace string) *Client[*appsv1.DaemonSet, *appsv1.DaemonSetList] {
	return gentype.NewClientWithList("daemonsets", g.rest, ParameterCodec, namespace,
		func() *appsv1.DaemonSet { return &appsv1.DaemonSet{} }, func() *appsv1.DaemonSetList { return &appsv1.DaemonSetList{} },
		gentype.PrefersProtobuf[*appsv1.DaemonSet]())
}

// Deployments is the client of the Deployments in namespace ("" = all namespaces).
func (g AppsV1) Deployments(namespace string) *Client[*appsv1.Deployment, *appsv1.DeploymentList] {
	return gentype.NewClientWithList("deployments", g.rest, ParameterCodec, namespace,
		func() *appsv1.Deployment { return &appsv1.Deployment{} }, func() *appsv1.DeploymentList { return &appsv1.DeploymentList{} },
		gentype.PrefersProtobuf[*appsv1.Deployment]())
}

// StatefulSets is the client of the StatefulSets in namespace ("" = all namespaces).
func (g AppsV1) StatefulSets(namespace string) *Client[*appsv1.StatefulSet, *appsv1.StatefulSetList] {
	return gentype.NewClientWithList("statefulsets", g.rest, ParameterCodec, namespace,
		func() *appsv1.StatefulSet { return &appsv1.StatefulSet{} }, func() *appsv1.StatefulSetList { return &appsv1.StatefulSetList{} },
		gentype.PrefersProtobuf[*appsv1.StatefulSet]())
}

// ReplicaSets is the client of the ReplicaSets in namespace ("" = all namespaces).
func (g AppsV1) ReplicaSets(namespace string) *Client[*appsv1.ReplicaSet, *appsv1.ReplicaSetList] {
	return gentype.NewClientWithList("replicasets", g.rest, ParameterCodec, namespace,
		func() *appsv1.ReplicaSet { return &appsv1.ReplicaSet{} }, func() *appsv1.ReplicaSetList { return &appsv1.ReplicaSetList{} },
		gentype.PrefersProtobuf[*appsv1.ReplicaSet]())
}

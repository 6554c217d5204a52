package testenv

import (
	"context"
	"os"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func testCRD() *apiextv1.CustomResourceDefinition {
	preserve := true
	return &apiextv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.test.slipway.dev"},
		Spec: apiextv1.CustomResourceDefinitionSpec{
			Group: "test.slipway.dev",
			Names: apiextv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextv1.NamespaceScoped,
			Versions: []apiextv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextv1.CustomResourceValidation{OpenAPIV3Schema: &apiextv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve}},
			}},
		},
	}
}

// TestControlPlane starts etcd + kube-apiserver with a CRD, uses both the
// rest.Config and the kubeconfig file, and checks Stop removes its state.
func TestControlPlane(t *testing.T) {
	t.Parallel() // a control plane of its own: nothing shared with the package's cluster or another test
	if os.Getenv(EnvSkip) == "1" || testing.Short() {
		t.Skip("no control plane: SLIPWAY_SKIP_CLUSTER=1 or -short")
	}
	ctx := context.Background()
	env, err := Start(ctx, Options{CRDs: []*apiextv1.CustomResourceDefinition{testCRD()}, ToolsDir: os.Getenv(EnvToolsDir)})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("get namespace default: %v", err)
	}
	res, err := cs.Discovery().ServerResourcesForGroupVersion("test.slipway.dev/v1")
	if err != nil || len(res.APIResources) == 0 {
		t.Fatalf("CRD not served: %v", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	v, err := kubernetes.NewForConfigOrDie(cfg).Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("kubeconfig does not reach the apiserver: %v", err)
	}
	if v.GitVersion != "v1.36.3" {
		t.Errorf("server version %q, want v1.36.3", v.GitVersion)
	}
	pids := env.Pids()
	env.Stop()
	assertGone(t, pids)
	if _, err := os.Stat(env.Dir); !os.IsNotExist(err) {
		t.Errorf("state directory %s left behind (%v)", env.Dir, err)
	}
}

// TestClusterStopLeavesNothing starts a one-node cluster with a node command
// and checks Stop ends every process it started.
func TestClusterStopLeavesNothing(t *testing.T) {
	t.Parallel() // a control plane of its own: nothing shared with the package's cluster or another test
	if os.Getenv(EnvSkip) == "1" || testing.Short() {
		t.Skip("no control plane: SLIPWAY_SKIP_CLUSTER=1 or -short")
	}
	env, err := Start(context.Background(), Options{Cluster: true, Nodes: 1, ToolsDir: os.Getenv(EnvToolsDir),
		NodeCommand: []string{"sleep", "100000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	pids := env.Pids()
	for n, pid := range env.Supervisor.Pids() {
		pids["node command of "+n] = pid
	}
	if len(pids) != 6 {
		t.Errorf("pids %v, want etcd, apiserver, controller-manager, scheduler, kwok and one node command", pids)
	}
	env.Stop()
	assertGone(t, pids)
	if _, err := os.Stat(env.Dir); !os.IsNotExist(err) {
		t.Errorf("state directory %s left behind (%v)", env.Dir, err)
	}
}

package eds

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/crds"
	edscli "slipway.dev/slipway/ops/eds/cli"
)

// installDataDogCRDs applies DataDog's CRDs (their repository's YAML,
// config/crd/bases/v1, kept as test data) once per test binary.
var installDataDogCRDs = sync.OnceValue(func() error {
	files, err := filepath.Glob("testdata/datadog/*.yaml")
	if err != nil || len(files) != 3 {
		return fmt.Errorf("DataDog's CRDs in testdata/datadog: %v %v", files, err)
	}
	var objs []*apiextv1.CustomResourceDefinition
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		crd := &apiextv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(raw, crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		objs = append(objs, crd)
	}
	return crds.ApplyObjects(context.Background(), env.Config, objs)
})

// A DataDog user moves over: live datadoghq.com/v1alpha1 objects and the
// pods DataDog's controller made (played here as it makes them: labels,
// template hash, owned by the ERS, pinned to their node) are handed to
// slipway by kubectl eds migrate-from-datadog. No pod is replaced (UIDs
// before and after), none is created, DataDog's objects are gone, and a
// later template change goes through slipway's canary.
func TestMigrateFromDataDogKeepsEveryPod(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	if err := installDataDogCRDs(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rc := h.kube.CoreV1().RESTClient()
	dd := func(resource string) string { return edscli.DataDogAPI + "/namespaces/" + h.ns + "/" + resource }
	post := func(resource, body string) map[string]any {
		t.Helper()
		var out map[string]any
		raw, err := rc.Post().AbsPath(dd(resource)).Body([]byte(body)).SetHeader("Content-Type", "application/json").Do(ctx).Raw()
		if err != nil {
			t.Fatalf("create %s: %v", resource, err)
		}
		if err := yaml.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	status := func(resource, name, body string) {
		t.Helper()
		if err := rc.Patch(types.MergePatchType).AbsPath(dd(resource) + "/" + name + "/status").Body([]byte(body)).Do(ctx).Error(); err != nil {
			t.Fatalf("status of %s: %v", name, err)
		}
	}
	nodeA, nodeB := h.addNode("a"), h.addNode("b")
	tmpl := fmt.Sprintf(`{"metadata":{"labels":{"app":"agent"}},"spec":{"tolerations":[{"key":"eds-test","operator":"Equal","value":%q,"effect":"NoSchedule"}],"containers":[{"name":"daemon","image":"agent:v1"}]}}`, h.ns)
	edsObj := post("extendeddaemonsets", `{"apiVersion":"datadoghq.com/v1alpha1","kind":"ExtendedDaemonSet","metadata":{"name":"agent"},"spec":{"selector":{"matchLabels":{"eds-test":"`+h.ns+`"}},`+
		`"strategy":{"canary":{"replicas":1,"duration":"2s","noRestartsDuration":"1s"}},"template":`+tmpl+`}}`)
	edsUID := edsObj["metadata"].(map[string]any)["uid"].(string)
	ersName := "agent-ddhash"
	post("extendeddaemonsetreplicasets", `{"apiVersion":"datadoghq.com/v1alpha1","kind":"ExtendedDaemonSetReplicaSet","metadata":{"name":"`+ersName+`",`+
		`"labels":{"extendeddaemonset.datadoghq.com/name":"agent"},"annotations":{"extendeddaemonset.datadoghq.com/templatehash":"ddhash"},`+
		`"ownerReferences":[{"apiVersion":"datadoghq.com/v1alpha1","kind":"ExtendedDaemonSet","name":"agent","uid":"`+edsUID+`","controller":true}]},"spec":{"template":`+tmpl+`}}`)
	status("extendeddaemonsets", "agent", `{"status":{"activeReplicaSet":"`+ersName+`","state":"Running","desired":2,"current":2,"ready":2,"available":2,"upToDate":2,"ignoredUnresponsiveNodes":0}}`)
	ers, err := rc.Get().AbsPath(dd("extendeddaemonsetreplicasets") + "/" + ersName).Do(ctx).Raw()
	if err != nil {
		t.Fatal(err)
	}
	var ersMeta struct{ Metadata metav1.ObjectMeta }
	_ = yaml.Unmarshal(ers, &ersMeta)
	// A DataDog setting gives nodeA's pod more memory: DataDog made it so.
	post("extendeddaemonsetsettings", `{"apiVersion":"datadoghq.com/v1alpha1","kind":"ExtendedDaemonsetSetting","metadata":{"name":"big"},"spec":{"reference":{"kind":"ExtendedDaemonSet","name":"agent"},`+
		`"nodeSelector":{"matchLabels":{"kubernetes.io/hostname":"`+nodeA+`"}},"containers":[{"name":"daemon","resources":{"requests":{"memory":"123Mi"}}}]}}`)
	yes := true
	before := map[types.UID]string{}
	for _, node := range []string{nodeA, nodeB} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: ersName + "-",
			Labels:      map[string]string{"app": "agent", v1.DataDogLabelName: "agent", v1.DataDogLabelReplicaSet: ersName},
			Annotations: map[string]string{v1.DataDog(v1.AnnotationTemplateHash): "ddhash"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "datadoghq.com/v1alpha1", Kind: "ExtendedDaemonSetReplicaSet", Name: ersName,
				UID: ersMeta.Metadata.UID, Controller: &yes}}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "daemon", Image: "agent:v1"}},
				Tolerations: []corev1.Toleration{{Key: "eds-test", Operator: corev1.TolerationOpEqual, Value: h.ns, Effect: corev1.TaintEffectNoSchedule}}}}
		if node == nodeA {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("123Mi")}
		}
		out, err := h.kube.CoreV1().Pods(h.ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before[out.UID] = node
	}
	h.eventually(30*time.Second, "DataDog's pods running", func() (bool, string) {
		list, _ := h.kube.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{})
		n := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				n++
			}
		}
		return n == 2, fmt.Sprint(n)
	})

	cl, out := h.kubectlEDS("")
	if err := cl.MigrateFromDataDog(ctx, "agent"); err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(out.String()))
	h.rolledOut("agent", "agent:v1", 2)
	after := h.pods("agent")
	if len(after) != 2 {
		t.Errorf("%d pods after the migration, want the 2 DataDog made", len(after))
	}
	for _, p := range after {
		if before[p.UID] == "" || p.DeletionTimestamp != nil {
			t.Errorf("pod %s (uid %s) is not one of DataDog's %v: the migration replaced a pod", p.Name, p.UID, before)
		}
	}
	if _, err := h.eds.EdsV1alpha1().ExtendedDaemonsetSettings(h.ns).Get(ctx, "big", metav1.GetOptions{}); err != nil {
		t.Errorf("DataDog's setting not copied: %v", err)
	}
	if err := rc.Get().AbsPath(dd("extendeddaemonsets") + "/agent").Do(ctx).Error(); err == nil {
		t.Error("DataDog's ExtendedDaemonSet is still there")
	}
	time.Sleep(2 * time.Second) // nothing replaced after the unfreeze either
	for _, p := range h.pods("agent") {
		if before[p.UID] == "" {
			t.Errorf("a new pod %s after the migration", p.Name)
		}
	}
	// A later template change goes through slipway's canary.
	h.setImage("agent", "agent:v2")
	e := h.waitState("agent", v1.StateCanary, 20*time.Second)
	if len(e.Status.Canary.Nodes) != 1 {
		t.Errorf("canary on %v, want one node", e.Status.Canary.Nodes)
	}
	h.rolledOut("agent", "agent:v2", 2)
	if h.events("agent")[EventCanaryValidated] == 0 {
		t.Errorf("no %s Event: the change did not go through slipway's canary", EventCanaryValidated)
	}
}

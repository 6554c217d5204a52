package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// DataDogAPI is the path of DataDog's ExtendedDaemonSet API.
const DataDogAPI = "/apis/datadoghq.com/v1alpha1"

// datadogObject is what the migration reads of DataDog's objects: their
// specs are field-compatible with slipway's and are copied as they are.
type datadogObject struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     json.RawMessage   `json:"spec"`
	Status   struct {
		ActiveReplicaSet string `json:"activeReplicaSet"`
		Canary           *struct {
			ReplicaSet string `json:"replicaSet"`
		} `json:"canary"`
	} `json:"status"`
}

// MigrateTimeout bounds each wait of the migration.
var MigrateTimeout = 2 * time.Minute

// MigrateFromDataDog hands DataDog's ExtendedDaemonSet name (and its
// settings) to slipway without restarting a pod or leaving a node without
// its daemon:
//
//  1. DataDog's EDS is frozen (its rollout-frozen annotation: DataDog's
//     controller creates and deletes nothing more), its settings copied;
//  2. slipway's EDS is created frozen, with DataDog's spec and annotations,
//     and the slipway controller gives it its ERS;
//  3. each of DataDog's pods is handed over: slipway's labels, and slipway's
//     ERS as controller; pods of DataDog's active template (by their
//     template hash) become slipway's up-to-date pods, any other is marked
//     outdated and replaced later under the rolling limits;
//  4. DataDog's EDS, ERSs and settings are deleted with orphaning (the
//     pods stay), and slipway's EDS is unfrozen.
//
// A DataDog canary in progress is refused: validate or fail it first.
func (c *Client) MigrateFromDataDog(ctx context.Context, name string) error {
	if name == "" {
		return errors.New("name the DataDog ExtendedDaemonSet to migrate (kubectl eds migrate-from-datadog NAME)")
	}
	ns := c.Namespace
	rc := c.Kube.CoreV1().RESTClient()
	path := func(resource, obj string) string {
		p := DataDogAPI + "/namespaces/" + ns + "/" + resource
		if obj != "" {
			p += "/" + obj
		}
		return p
	}
	var dd datadogObject
	raw, err := rc.Get().AbsPath(path("extendeddaemonsets", name)).Do(ctx).Raw()
	if err != nil {
		return fmt.Errorf("read DataDog's ExtendedDaemonSet %s/%s (datadoghq.com/v1alpha1): %w", ns, name, err)
	}
	if err := json.Unmarshal(raw, &dd); err != nil {
		return fmt.Errorf("decode DataDog's ExtendedDaemonSet %s/%s: %w", ns, name, err)
	}
	if dd.Status.Canary != nil && dd.Status.Canary.ReplicaSet != "" {
		return fmt.Errorf("DataDog's ExtendedDaemonSet %s/%s runs a canary (%s): validate or fail it first, then migrate", ns, name, dd.Status.Canary.ReplicaSet)
	}
	if dd.Status.ActiveReplicaSet == "" {
		return fmt.Errorf("DataDog's ExtendedDaemonSet %s/%s has no active ERS yet: wait until it has one", ns, name)
	}
	frozen := v1.DataDog(v1.AnnotationRolloutFrozen)
	wasFrozen := dd.Metadata.Annotations[frozen] == "true"
	// 1. Freeze DataDog's.
	if err := mergePatch(ctx, c, path("extendeddaemonsets", name), map[string]any{"metadata": map[string]any{"annotations": map[string]string{frozen: "true"}}}); err != nil {
		return fmt.Errorf("freeze DataDog's ExtendedDaemonSet (its controller must create and delete nothing during the handover): %w", err)
	}
	activeHash, err := c.datadogTemplateHash(ctx, path("extendeddaemonsetreplicasets", dd.Status.ActiveReplicaSet))
	if err != nil {
		return err
	}
	settings, err := c.copyDataDogSettings(ctx, path("extendeddaemonsetsettings", ""), name)
	if err != nil {
		return err
	}
	// 2. slipway's, frozen, with DataDog's spec.
	var spec v1.ExtendedDaemonSetSpec
	if err := json.Unmarshal(dd.Spec, &spec); err != nil {
		return fmt.Errorf("DataDog's spec does not fit slipway's ExtendedDaemonSet: %w", err)
	}
	annotations := map[string]string{}
	for k, val := range dd.Metadata.Annotations {
		if k != frozen && k != "kubectl.kubernetes.io/last-applied-configuration" {
			annotations[k] = val
		}
	}
	annotations[v1.AnnotationRolloutFrozen] = "true"
	e := &v1.ExtendedDaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: dd.Metadata.Labels, Annotations: annotations}, Spec: spec}
	if _, err := c.EDS.ExtendedDaemonSets(ns).Create(ctx, e, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create slipway's ExtendedDaemonSet %s/%s: %w", ns, name, err)
	}
	var ers *v1.ExtendedDaemonSetReplicaSet
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, MigrateTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := c.EDS.ExtendedDaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || got.Status.ActiveReplicaSet == "" {
			return false, nil
		}
		ers, err = c.EDS.ExtendedDaemonSetReplicaSets(ns).Get(ctx, got.Status.ActiveReplicaSet, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("slipway's ExtendedDaemonSet %s/%s got no ERS (is the slipway eds controller running?): %w", ns, name, err)
	}
	// 3. Hand the pods over.
	pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1.DataDogLabelName + "=" + name})
	if err != nil {
		return fmt.Errorf("list DataDog's pods of %s: %w", name, err)
	}
	handed := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		if err := c.handOver(ctx, p, name, ers, activeHash); err != nil {
			return err
		}
		handed++
	}
	// 4. DataDog's objects go, their dependents stay; slipway's is unfrozen.
	orphan := metav1.DeletePropagationOrphan
	del := func(p string) error {
		body, _ := json.Marshal(metav1.DeleteOptions{PropagationPolicy: &orphan})
		err := rc.Delete().AbsPath(p).Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error()
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	if err := del(path("extendeddaemonsets", name)); err != nil {
		return fmt.Errorf("delete DataDog's ExtendedDaemonSet %s with orphaning: %w", name, err)
	}
	ersList, err := c.datadogList(ctx, path("extendeddaemonsetreplicasets", ""))
	if err != nil {
		return err
	}
	for _, s := range ersList {
		if s.Metadata.Labels[v1.DataDogLabelName] == name || ownedBy(s.Metadata, name) {
			if err := del(path("extendeddaemonsetreplicasets", s.Metadata.Name)); err != nil {
				return fmt.Errorf("delete DataDog's ERS %s with orphaning: %w", s.Metadata.Name, err)
			}
		}
	}
	for _, s := range settings {
		if err := del(path("extendeddaemonsetsettings", s)); err != nil {
			return fmt.Errorf("delete DataDog's ExtendedDaemonsetSetting %s: %w", s, err)
		}
	}
	// The garbage collector orphans the dependents, then removes DataDog's
	// EDS: wait for that, so that "migrated" means DataDog's is gone.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, MigrateTimeout, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(rc.Get().AbsPath(path("extendeddaemonsets", name)).Do(ctx).Error()), nil
	})
	if err != nil {
		return fmt.Errorf("DataDog's ExtendedDaemonSet %s is still there (the garbage collector orphans its dependents first; is kube-controller-manager running?): %w", name, err)
	}
	if !wasFrozen {
		if _, err := c.EDS.ExtendedDaemonSets(ns).Patch(ctx, name, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+v1.AnnotationRolloutFrozen+`":null}}}`), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("unfreeze slipway's ExtendedDaemonSet %s (kubectl eds unfreeze %s): %w", name, name, err)
		}
	}
	_, err = fmt.Fprintf(c.Out, "extendeddaemonset %s/%s migrated from DataDog: %d pods handed to ERS %s, %d settings copied; DataDog's objects deleted (pods kept)\n",
		ns, name, handed, ers.Name, len(settings))
	return err
}

// handOver gives DataDog's pod p to slipway's ERS: slipway's labels and
// controller. A pod of DataDog's active template (its template hash) is
// slipway's ERS's; another keeps a replica set label no ERS has, so the
// rolling update replaces it.
func (c *Client) handOver(ctx context.Context, p *corev1.Pod, name string, ers *v1.ExtendedDaemonSetReplicaSet, activeHash string) error {
	replicaSet := ers.Name
	if activeHash == "" || p.Annotations[v1.DataDog(v1.AnnotationTemplateHash)] != activeHash {
		replicaSet = "datadog-" + p.Labels[v1.DataDogLabelReplicaSet]
	}
	var refs []metav1.OwnerReference
	for _, r := range p.OwnerReferences {
		if r.Controller == nil || !*r.Controller {
			refs = append(refs, r)
		}
	}
	refs = append(refs, *metav1.NewControllerRef(ers, v1.SchemeGroupVersion.WithKind("ExtendedDaemonSetReplicaSet")))
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":             p.UID, // the pod read, not a replacement
		"labels":          map[string]string{v1.LabelName: name, v1.LabelReplicaSet: replicaSet},
		"annotations":     map[string]string{v1.AnnotationTemplateHash: ers.Spec.TemplateGeneration},
		"ownerReferences": refs,
	}})
	if _, err := c.Kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("hand pod %s to slipway's ERS %s: %w", p.Name, ers.Name, err)
	}
	return nil
}

func (c *Client) datadogTemplateHash(ctx context.Context, path string) (string, error) {
	raw, err := c.Kube.CoreV1().RESTClient().Get().AbsPath(path).Do(ctx).Raw()
	if err != nil {
		return "", fmt.Errorf("read DataDog's active ERS: %w", err)
	}
	var s datadogObject
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("decode DataDog's active ERS: %w", err)
	}
	return s.Metadata.Annotations[v1.DataDog(v1.AnnotationTemplateHash)], nil
}

func (c *Client) datadogList(ctx context.Context, path string) ([]datadogObject, error) {
	raw, err := c.Kube.CoreV1().RESTClient().Get().AbsPath(path).Do(ctx).Raw()
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", path, err)
	}
	var list struct {
		Items []datadogObject `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	return list.Items, nil
}

// copyDataDogSettings writes slipway's copy of each DataDog setting that
// references name and returns their names.
func (c *Client) copyDataDogSettings(ctx context.Context, path, name string) ([]string, error) {
	list, err := c.datadogList(ctx, path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range list {
		var spec v1.ExtendedDaemonsetSettingSpec
		if err := json.Unmarshal(s.Spec, &spec); err != nil {
			return nil, fmt.Errorf("DataDog's setting %s does not fit slipway's: %w", s.Metadata.Name, err)
		}
		if spec.Reference == nil || spec.Reference.Name != name {
			continue
		}
		copied := &v1.ExtendedDaemonsetSetting{ObjectMeta: metav1.ObjectMeta{Name: s.Metadata.Name, Namespace: c.Namespace, Labels: s.Metadata.Labels}, Spec: spec}
		if _, err := c.EDS.ExtendedDaemonsetSettings(c.Namespace).Create(ctx, copied, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("copy DataDog's setting %s: %w", s.Metadata.Name, err)
		}
		out = append(out, s.Metadata.Name)
	}
	return out, nil
}

func ownedBy(m metav1.ObjectMeta, name string) bool {
	for _, r := range m.OwnerReferences {
		if r.Kind == "ExtendedDaemonSet" && r.Name == name {
			return true
		}
	}
	return false
}

func mergePatch(ctx context.Context, c *Client, path string, body any) error {
	raw, _ := json.Marshal(body)
	return c.Kube.CoreV1().RESTClient().Patch(types.MergePatchType).AbsPath(path).Body(raw).Do(ctx).Error()
}

package eds

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// Defect: delete --cascade=orphan, apply again, delete: the pods stayed.
// The orphaned ERS (and PodTemplate) was used by its label but never got
// an owner reference back. It is adopted as the DaemonSet controller's
// ControllerRefManager adopts (no controller, not being deleted, the
// ExtendedDaemonSet read live with the same UID): no pod is replaced, and
// the last delete takes the pods with it.
func TestOrphanedERSIsAdoptedAndDeletedWithItsEDS(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	h.create(daemon("agent", "agent:v1"))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	uids := map[types.UID]bool{}
	for _, p := range h.pods("agent") {
		uids[p.UID] = true
	}
	orphan := metav1.DeletePropagationOrphan
	if err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Delete(ctx, "agent", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	h.eventually(60*time.Second, "the EDS gone and its ERS orphaned", func() (bool, string) {
		_, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Get(ctx, "agent", metav1.GetOptions{})
		list, lerr := h.eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(h.ns).List(ctx, metav1.ListOptions{})
		if lerr != nil || len(list.Items) != 1 {
			return false, fmt.Sprint(lerr, list)
		}
		return err != nil && len(list.Items[0].OwnerReferences) == 0, fmt.Sprintf("get: %v; owners %v", err, list.Items[0].OwnerReferences)
	})
	e := h.create(daemon("agent", "agent:v1"))
	h.eventually(30*time.Second, "the ERS and the PodTemplate adopted", func() (bool, string) {
		list, err := h.eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(h.ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			return false, fmt.Sprint(err, list)
		}
		pt, err := h.kube.CoreV1().PodTemplates(h.ns).Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return metav1.IsControlledBy(&list.Items[0], e) && metav1.IsControlledBy(pt, e),
			fmt.Sprintf("ERS owners %v, PodTemplate owners %v", list.Items[0].OwnerReferences, pt.OwnerReferences)
	})
	h.rolledOut("agent", "agent:v1", clusterNodes)
	for _, p := range h.pods("agent") {
		if !uids[p.UID] {
			t.Errorf("pod %s on %s is new: adopting replaced a pod", p.Name, p.Spec.NodeName)
		}
	}
	if h.events("agent")[EventAdopted] == 0 {
		t.Errorf("no %s Event", EventAdopted)
	}
	if err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Delete(ctx, "agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(60*time.Second, "the pods deleted with the ExtendedDaemonSet", func() (bool, string) {
		var live []string
		for _, p := range h.pods("agent") {
			if p.DeletionTimestamp == nil {
				live = append(live, p.Name)
			}
		}
		pt, err := h.kube.CoreV1().PodTemplates(h.ns).Get(ctx, "agent", metav1.GetOptions{})
		return len(live) == 0 && err != nil, fmt.Sprintf("pods %v; PodTemplate %v %v", live, pt != nil && err == nil, err)
	})
}

// The advice for an ERS of the EDS's name controlled by something else
// does not delete the daemon's pods with it.
func TestForeignERSAdviceKeepsThePods(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	e := daemon("agent", "agent:v1")
	hash := TemplateHash(&e.Spec.Template)
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}
	owner, err := h.kube.CoreV1().ConfigMaps(h.ns).Create(ctx, other, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	foreign := &v1.ExtendedDaemonSetReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: ERSName("agent", hash),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: &yes}}},
		Spec: v1.ExtendedDaemonSetReplicaSetSpec{Template: e.Spec.Template, TemplateGeneration: hash}}
	if _, err := h.eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(h.ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.create(e)
	h.eventually(30*time.Second, "ReconcileError with safe advice", func() (bool, string) {
		for _, c := range h.get("agent").Status.Conditions {
			if c.Type == v1.ConditionReconcileError && c.Status == metav1.ConditionTrue {
				return containsAll(c.Message, "ConfigMap owner", "--cascade=orphan"), c.Message
			}
		}
		return false, "no ReconcileError"
	})
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// Defect: what the controller last wrote for an ExtendedDaemonSet
// (written["eds/<uid>"]) and its ERSs stayed in memory after they were
// deleted: a slow leak over the controller's life.
func TestWrittenStatusGoesWithItsObject(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	e := h.create(daemon("agent", "agent:v1"))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	ers, err := h.eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(h.ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(ers.Items) != 1 {
		t.Fatal(err, ers)
	}
	remembered := func() []string {
		h.ctrl.mu.Lock()
		defer h.ctrl.mu.Unlock()
		var out []string
		for k := range h.ctrl.written {
			if strings.HasSuffix(k, string(e.UID)) || strings.HasSuffix(k, string(ers.Items[0].UID)) {
				out = append(out, k)
			}
		}
		return out
	}
	if len(remembered()) == 0 {
		t.Fatal("nothing remembered for the ExtendedDaemonSet: the test sees nothing")
	}
	if err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Delete(ctx, "agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(60*time.Second, "what was written forgotten", func() (bool, string) {
		left := remembered()
		return len(left) == 0, fmt.Sprint(left)
	})
}

// Adoption works with the manifest's RBAC (the controller's real rights):
// its live read is a list by name and the PodTemplate's an update.
func TestAdoptionWithTheManifestRBAC(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t)
	h.installManifestRBAC()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + h.ns + ":" + controllerName}
	h.startController(Options{Config: cfg})
	ctx := context.Background()
	h.create(daemon("agent", "agent:v1"))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	orphan := metav1.DeletePropagationOrphan
	if err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Delete(ctx, "agent", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	h.eventually(60*time.Second, "the EDS gone", func() (bool, string) {
		_, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Get(ctx, "agent", metav1.GetOptions{})
		return err != nil, fmt.Sprint(err)
	})
	e := h.create(daemon("agent", "agent:v1"))
	h.eventually(30*time.Second, "the ERS and the PodTemplate adopted", func() (bool, string) {
		list, err := h.eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(h.ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			return false, fmt.Sprint(err, list)
		}
		pt, err := h.kube.CoreV1().PodTemplates(h.ns).Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return metav1.IsControlledBy(&list.Items[0], e) && metav1.IsControlledBy(pt, e), fmt.Sprint(list.Items[0].OwnerReferences, pt.OwnerReferences)
	})
}

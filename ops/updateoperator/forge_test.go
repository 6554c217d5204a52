package updateoperator

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/testenv"
)

// kubeletOf is a client with the rights of node's kubelet (user
// system:node:<node>, group system:nodes; the API server's Node
// authorizer): it may write any annotation of its own Node.
func kubeletOf(t *testing.T, admin *rest.Config, node string) *kubernetes.Clientset {
	t.Helper()
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"}}
	return kubernetes.NewForConfigOrDie(cfg)
}

// A node (its kubelet, or anything root on it) that writes the
// controller's keys on its own Node, as if mid-update with a clock in
// 2999 and the operator's cordon, holds no slot: with max-concurrent 1
// the other node still updates, the forged keys are written back from
// the controller's record, and no failure is counted for the forged
// target. Before the record, the forged node held the only slot for ever.
func TestForgedControllerKeysHoldNoSlot(t *testing.T) {
	f := newFleet(t, "forge", 2)
	victim, attacker := f.nodes[0], f.nodes[1]
	// Both wait out of the rollout until the forgery is in place, so that
	// the controller has made its record of both nodes first; the
	// attacker stays out (an admin's exclusion does not stop its kubelet).
	for _, n := range f.nodes {
		f.patch(n, map[string]any{"metadata": map[string]any{"labels": map[string]any{f.keys.Exclude(): "true"}}})
	}
	eventually(t, time.Minute, "the attacker's agent finds v2", func() (bool, string) {
		v := f.keys.View(f.node(attacker), "")
		return v.State == StateUpdateAvailable, "state " + string(v.State)
	})
	stop := f.controller(nil)
	defer stop()
	eventually(t, time.Minute, "the controller's record exists", func() (bool, string) {
		cm, err := f.kube.CoreV1().ConfigMaps("default").Get(context.Background(), FleetStateName(f.prefix), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return cm.Data[recordsMarker] != "", fmt.Sprintf("data keys %d", len(cm.Data))
	})
	// A taken-over node's agent does not answer intents honestly.
	f.stopAgent(attacker)
	kubelet := kubeletOf(t, f.env.Config, attacker)
	forged := map[string]any{
		f.keys.Wanted(): string(IntentReboot), f.keys.Key(KeyTransition): "2999-01-01T00:00:00Z",
		f.keys.Key(KeyDrainStarted): "2999-01-01T00:00:00Z", f.keys.Key(KeyTargetVersion): "v9",
		f.keys.Key(KeyFinished): "2999-01-01T00:00:00Z", f.keys.Key(KeyFailures): "0",
		drain.AnnotationCordonedBy: f.keys.CordonOwner(), drain.AnnotationSchedulableBefore: "true",
		f.keys.Active(): string(IntentReboot), f.keys.State(): string(StateBusy),
	}
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": forged}})
	if _, err := kubelet.CoreV1().Nodes().Patch(context.Background(), attacker, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		t.Fatalf("the kubelet may write its own Node's annotations: %v", err)
	}
	f.patch(victim, map[string]any{"metadata": map[string]any{"labels": map[string]any{f.keys.Exclude(): nil}}})
	eventually(t, 3*time.Minute, "the victim updated beside the forged node", func() (bool, string) {
		v := f.keys.View(f.node(victim), "")
		got := f.version(victim)
		return got == "v2" && v.Wanted == IntentStabilize && v.State == StateUpToDate && !v.CordonedByUs,
			fmt.Sprintf("%s wanted %s state %s", got, v.Wanted, v.State)
	})
	eventually(t, time.Minute, "the forged keys written back", func() (bool, string) {
		a := f.node(attacker).Annotations
		return a[f.keys.Wanted()] != string(IntentReboot) && a[f.keys.Key(KeyTransition)] != "2999-01-01T00:00:00Z" && has(f.eventReasons(attacker), ReasonRestored),
			fmt.Sprintf("wanted %s transition %s", a[f.keys.Wanted()], a[f.keys.Key(KeyTransition)])
	})
	st := readFleet(t, f)
	if len(st.Failed["v9"]) > 0 {
		t.Errorf("a failure counted against the forged target v9: %v", st.Failed)
	}
	if st.LastDone.After(time.Now()) {
		t.Errorf("the pause counts from %s, a time in the future", st.LastDone)
	}
}

// readFleet reads the fleet state of f's controller.
func readFleet(t *testing.T, f *fleet) Fleet {
	t.Helper()
	cm, err := f.kube.CoreV1().ConfigMaps("default").Get(context.Background(), FleetStateName(f.prefix), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var st Fleet
	if d := cm.Data[fleetDataKey]; d != "" {
		if err := json.Unmarshal([]byte(d), &st); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// A Node deleted and made again under the same name while no controller
// ran is a new node: the record of the old one (its failures here) is not
// its own, so nothing of it is written back on the new Node.
func TestRecreatedNodeStartsWithAnEmptyRecord(t *testing.T) {
	f := newFleet(t, "recreate", 0)
	ctx := context.Background()
	name := "recreate-0"
	create := func(ann map[string]string) {
		n := testenv.FakeNode(name)
		n.Labels[f.keys.InterfaceVersion()] = InterfaceVersion // spoken to: the controller wants stabilize on it
		for k, v := range ann {
			n.Annotations[k] = v
		}
		if _, err := f.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(map[string]string{f.keys.Wanted(): string(IntentStabilize), f.keys.Key(KeyFailures): "3", f.keys.Key(KeyLastFailure): stamp(time.Now())})
	t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	stop := f.controller(nil)
	eventually(t, time.Minute, "the old node's failures recorded", func() (bool, string) {
		cm, err := f.kube.CoreV1().ConfigMaps("default").Get(ctx, FleetStateName(f.prefix), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		r := cm.Data[nodeRecordPrefix+name]
		return strings.Contains(r, `"3"`), r
	})
	stop()
	if err := f.kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the old Node gone", func() (bool, string) {
		_, err := f.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), errString(err)
	})
	create(nil)
	f.controller(nil)
	eventually(t, time.Minute, "the new node told stabilize", func() (bool, string) {
		w := f.node(name).Annotations[f.keys.Wanted()]
		return w == string(IntentStabilize), "wanted " + w
	})
	time.Sleep(2 * time.Second) // a few more turns (--resync 1s)
	if n := f.node(name); n.Annotations[f.keys.Key(KeyFailures)] != "" || has(f.eventReasons(name), ReasonRestored) {
		t.Errorf("the new node got the old one's record: failures %q, Events %v", n.Annotations[f.keys.Key(KeyFailures)], f.eventReasons(name))
	}
}

package eds

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// DataDog's e2e expectations (controllers/extendeddaemonset_e2e_test.go in
// github.com/DataDog/extendeddaemonset, commit b6860a0), one row each: the
// scenario, what their test asserts, where, run here on the simulated
// cluster. A row whose expectation slipway does not meet on purpose says
// so (difference) and docs/eds.md gives the reason; the row then checks
// what slipway does instead.
type conformanceRow struct {
	scenario   string
	asserts    string
	where      string // lines in DataDog's file
	difference string // "" when the expectation holds
	run        func(t *testing.T, h *harness)
}

var conformanceRows = []conformanceRow{
	{"initial deployment", "the active ERS has status active and available = the number of nodes", "L85-L115", "", func(t *testing.T, h *harness) {
		h.create(withCanary(daemon("agent", "agent:v1"), time.Second))
		h.rolledOut("agent", "agent:v1", clusterNodes)
		s := h.ers(h.get("agent").Status.ActiveReplicaSet)
		if s.Status.Status != v1.ReplicaSetStatusActive || s.Status.Available != clusterNodes {
			t.Errorf("active ERS status %q, available %d", s.Status.Status, s.Status.Available)
		}
	}},
	{"canary restarts: auto-pause, then auto-fail", "state Canary Paused with reason StartError (the container's termination reason); later state Running with the condition Canary-Failed present",
		"L117-L195", "after the failure the state stays Canary Failed (DataDog: Running); the condition Canary-Failed is True in both", func(t *testing.T, h *harness) {
			e := withCanary(daemon("agent", "agent:v1"), time.Hour)
			one, three := int32(1), int32(3)
			e.Spec.Strategy.Canary.AutoPause = &v1.ExtendedDaemonSetSpecStrategyCanaryAutoPause{MaxRestarts: &one}
			e.Spec.Strategy.Canary.AutoFail = &v1.ExtendedDaemonSetSpecStrategyCanaryAutoFail{MaxRestarts: &three}
			h.create(e)
			h.rolledOut("agent", "agent:v1", clusterNodes)
			h.setImage("agent", "agent:v2")
			p := h.canaryPod("agent", h.waitState("agent", v1.StateCanary, 20*time.Second).Status.Canary.ReplicaSet)
			h.crashWith(p.Name, 2, "StartError")
			if got := h.waitState("agent", v1.StateCanaryPaused, 20*time.Second); got.Status.Reason != "StartError" {
				t.Errorf("paused reason %q, want StartError", got.Status.Reason)
			}
			h.crashWith(p.Name, 4, "StartError")
			got := h.waitState("agent", v1.StateCanaryFailed, 20*time.Second)
			if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionCanaryFailed); c == nil || c.Status != metav1.ConditionTrue {
				t.Errorf("condition Canary-Failed %+v, want True", c)
			}
		}},
	{"recover from a failed update", "a new template starts a canary (state Canary); DataDog's canary-valid annotation naming it makes the state Running",
		"L197-L226", "", func(t *testing.T, h *harness) {
			h.create(manual(daemon("agent", "agent:v1")))
			h.rolledOut("agent", "agent:v1", clusterNodes)
			h.setImage("agent", "agent:v2")
			cl, _ := h.kubectlEDS("")
			h.waitState("agent", v1.StateCanary, 20*time.Second)
			if err := cl.CanaryFail(context.Background(), "agent"); err != nil {
				t.Fatal(err)
			}
			h.waitState("agent", v1.StateCanaryFailed, 20*time.Second)
			h.setImage("agent", "agent:v3")
			ers := h.waitState("agent", v1.StateCanary, 20*time.Second).Status.Canary.ReplicaSet
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1.DataDog(v1.AnnotationCanaryValid), ers)
			if _, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Patch(context.Background(), "agent", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			h.rolledOut("agent", "agent:v3", clusterNodes)
		}},
	{"delete", "every pod labelled extendeddaemonset.datadoghq.com/name=<eds> is gone after the EDS is deleted", "L228-L241", "", func(t *testing.T, h *harness) {
		h.create(daemon("agent", "agent:v1"))
		h.rolledOut("agent", "agent:v1", clusterNodes)
		if err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Delete(context.Background(), "agent", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		h.eventually(60*time.Second, "the pods gone", func() (bool, string) {
			list, err := h.kube.CoreV1().Pods(h.ns).List(context.Background(), metav1.ListOptions{LabelSelector: v1.DataDogLabelName + "=agent"})
			return err == nil && len(list.Items) == 0, fmt.Sprint(err, len(list.Items))
		})
	}},
	{"image pull error", "state Canary Paused; condition Canary-Paused True with reason ErrImagePull or ImagePullBackOff; the canary ERS's PodCannotStart True, its message holding the reason",
		"L323-L389", "", func(t *testing.T, h *harness) { h.cannotStart(t, "ErrImagePull") }},
	{"container config error", "as above with CreateContainerConfigError", "L323-L376, L391-L413", "", func(t *testing.T, h *harness) { h.cannotStart(t, "CreateContainerConfigError") }},
	{"canary labels", "exactly one pod carries extendeddaemonsetreplicaset.datadoghq.com/canary=true during a one-node canary", "L508-L520", "", func(t *testing.T, h *harness) {
		h.create(withCanary(daemon("agent", "agent:v1"), time.Hour))
		h.rolledOut("agent", "agent:v1", clusterNodes)
		h.setImage("agent", "agent:v2")
		h.canaryPod("agent", h.waitState("agent", v1.StateCanary, 20*time.Second).Status.Canary.ReplicaSet)
		if n := h.labelled(v1.DataDogLabelCanary + "=true"); n != 1 {
			t.Errorf("%d pods with DataDog's canary label, want 1", n)
		}
	}},
	{"canary labels removed after validation", "no pod of the now active ERS carries the canary label",
		"L522-L555", "the canary pod keeps its canary label (the controller may not update pods: least privilege); it is replaced like any other when a later template rolls out", func(t *testing.T, h *harness) {
			h.create(manual(daemon("agent", "agent:v1")))
			h.rolledOut("agent", "agent:v1", clusterNodes)
			h.setImage("agent", "agent:v2")
			h.waitState("agent", v1.StateCanary, 20*time.Second)
			cl, _ := h.kubectlEDS("")
			if err := cl.CanaryValidate(context.Background(), "agent"); err != nil {
				t.Fatal(err)
			}
			h.rolledOut("agent", "agent:v2", clusterNodes)
			if n := h.labelled(v1.DataDogLabelCanary + "=true"); n != 1 {
				t.Errorf("%d pods with the canary label after validation; slipway keeps the one canary pod's", n)
			}
		}},
	{"ExtendedDaemonsetSetting", "the pods on the node the setting selects have its resources (and DataDog's labels extendeddaemonsetsetting.datadoghq.com/name and /namespace)",
		"L585-L690", "", func(t *testing.T, h *harness) {
			node := h.addNode("worker")
			setting := memorySetting("worker", "123Mi", metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": node}})
			if _, err := h.eds.EdsV1alpha1().ExtendedDaemonsetSettings(h.ns).Create(context.Background(), setting, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			h.create(h.ownDaemon("agent", "agent:v1"))
			h.rolledOut("agent", "agent:v1", 1)
			for _, p := range h.pods("agent") {
				if got := p.Spec.Containers[0].Resources.Requests.Memory(); got.Cmp(resource.MustParse("123Mi")) != 0 {
					t.Errorf("pod %s memory request %s, want 123Mi", p.Name, got)
				}
				if p.Labels[v1.DataDogLabelSettingName] != "worker" || p.Labels[v1.DataDogLabelSettingNamespace] != h.ns {
					t.Errorf("pod %s labels %v, want DataDog's setting labels", p.Name, p.Labels)
				}
			}
		}},
	{"validationMode manual", "a manual canary is not validated by time: the canary ERS does not become active", "L698-L790", "", func(t *testing.T, h *harness) {
		h.create(manual(daemon("agent", "agent:v1")))
		h.rolledOut("agent", "agent:v1", clusterNodes)
		h.setImage("agent", "agent:v2")
		canary := h.waitState("agent", v1.StateCanary, 20*time.Second).Status.Canary.ReplicaSet
		time.Sleep(3 * time.Second)
		if e := h.get("agent"); e.Status.ActiveReplicaSet == canary || e.Status.State != v1.StateCanary {
			t.Errorf("manual canary: state %s, active %s", e.Status.State, e.Status.ActiveReplicaSet)
		}
	}},
	{"rollout not blocked by pods failing before it", "every node gets a pod of the first template, none ready (a corrupted image); a new template goes through its canary to Running, the new ERS active and available on every node",
		"L785-L895", "a first deployment whose pods never become available is paced by slow start (one more pod in flight per slowStartIntervalDuration; DataDog creates more at each sync without counting the pods in flight), so only some nodes have a first-template pod when the new template comes; the rest of the row holds", func(t *testing.T, h *harness) {
			stop := h.waitsIn("agent:corrupted", "ErrImagePull")
			defer stop()
			h.create(withCanary(daemon("agent", "agent:corrupted"), 2*time.Second))
			time.Sleep(2 * time.Second) // the paced first deployment's pods are in flight
			h.eventually(60*time.Second, "the first ERS active, its pods current and none ready", func() (bool, string) {
				e := h.get("agent")
				if e.Status.ActiveReplicaSet == "" {
					return false, "no active ERS"
				}
				s := h.ers(e.Status.ActiveReplicaSet)
				return s.Status.Status == v1.ReplicaSetStatusActive && s.Status.Current >= 1 && s.Status.Ready == 0, fmt.Sprintf("%+v", s.Status)
			})
			h.setImage("agent", "agent:v2")
			h.waitState("agent", v1.StateCanary, 20*time.Second)
			h.rolledOut("agent", "agent:v2", clusterNodes)
			if s := h.ers(h.get("agent").Status.ActiveReplicaSet); s.Status.Status != v1.ReplicaSetStatusActive || s.Status.Available != clusterNodes {
				t.Errorf("new active ERS %q, available %d", s.Status.Status, s.Status.Available)
			}
		}},
	{"cannot start within maxSlowStartDuration", "with autoPause.maxSlowStartDuration 30m, a canary whose containers wait in CreateContainerConfigError is not paused",
		"L898-L1110", "", func(t *testing.T, h *harness) {
			e := withCanary(daemon("agent", "agent:v1"), time.Hour)
			e.Spec.Strategy.Canary.AutoPause = &v1.ExtendedDaemonSetSpecStrategyCanaryAutoPause{MaxSlowStartDuration: &metav1.Duration{Duration: 30 * time.Minute}}
			h.create(e)
			h.rolledOut("agent", "agent:v1", clusterNodes)
			stop := h.waitsIn("agent:broken", "CreateContainerConfigError")
			defer stop()
			h.setImage("agent", "agent:broken")
			ers := h.waitState("agent", v1.StateCanary, 20*time.Second).Status.Canary.ReplicaSet
			h.eventually(30*time.Second, "the canary pod unable to start", func() (bool, string) {
				for _, p := range h.pods("agent") {
					if p.Labels[v1.LabelReplicaSet] == ers && waiting(&p, "CreateContainerConfigError") {
						return true, ""
					}
				}
				return false, "not yet"
			})
			time.Sleep(2 * time.Second)
			if st := h.get("agent").Status; st.State != v1.StateCanary {
				t.Errorf("state %s (%s), want Canary: within maxSlowStartDuration", st.State, st.Reason)
			}
		}},
	{"ERS label", "ERSs carry extendeddaemonset.datadoghq.com/name=<eds> (their cleanup and tools select them by it)", "L306-L310 (ERS list by the EDS's name label)", "", func(t *testing.T, h *harness) {
		h.create(daemon("agent", "agent:v1"))
		h.rolledOut("agent", "agent:v1", clusterNodes)
		list, err := h.eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(h.ns).List(context.Background(), metav1.ListOptions{LabelSelector: v1.DataDogLabelName + "=agent"})
		if err != nil || len(list.Items) != 1 {
			t.Errorf("ERSs by DataDog's label: %v %d, want 1", err, len(list.Items))
		}
	}},
}

func TestDataDogConformance(t *testing.T) {
	for _, row := range conformanceRows {
		t.Run(strings.ReplaceAll(row.scenario, " ", "_"), func(t *testing.T) {
			t.Parallel()
			if row.difference != "" {
				t.Logf("deliberate difference from DataDog's %s (%s): %s", row.where, row.asserts, row.difference)
			}
			row.run(t, newHarness(t))
		})
	}
}

// crashWith makes a pod's container look restarted n times, its last end
// with reason (as a kubelet reports: StartError, OOMKilled, Error).
func (h *harness) crashWith(pod string, n int32, reason string) {
	h.t.Helper()
	h.patchStatus(pod, map[string]any{"status": map[string]any{
		"conditions": []map[string]any{{"type": "Ready", "status": "False", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
		"containerStatuses": []map[string]any{{"name": "daemon", "image": "x", "imageID": "", "ready": false, "restartCount": n,
			"state":     map[string]any{"waiting": map[string]any{"reason": "CrashLoopBackOff"}},
			"lastState": map[string]any{"terminated": map[string]any{"exitCode": 128, "reason": reason, "finishedAt": time.Now().UTC().Format(time.RFC3339)}}}},
	}})
}

func (h *harness) ers(name string) *v1.ExtendedDaemonSetReplicaSet {
	h.t.Helper()
	s, err := h.eds.EdsV1alpha1().ExtendedDaemonSetReplicaSets(h.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

func (h *harness) labelled(selector string) int {
	h.t.Helper()
	list, err := h.kube.CoreV1().Pods(h.ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		h.t.Fatal(err)
	}
	n := 0
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// cannotStart is DataDog's pauseOnCannotStart: a canary whose container
// waits in reason pauses, with the reason in the condition and DataDog's
// message on the ERS's PodCannotStart.
func (h *harness) cannotStart(t *testing.T, reason string) {
	h.create(withCanary(daemon("agent", "agent:v1"), time.Hour))
	h.rolledOut("agent", "agent:v1", clusterNodes)
	stop := h.waitsIn("agent:broken", reason)
	defer stop()
	h.setImage("agent", "agent:broken")
	e := h.waitState("agent", v1.StateCanaryPaused, 30*time.Second)
	if c := meta.FindStatusCondition(e.Status.Conditions, v1.ConditionCanaryPaused); c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason {
		t.Errorf("Canary-Paused %+v, want True with reason %s", c, reason)
	}
	var msg string
	h.eventually(20*time.Second, "PodCannotStart on the canary ERS", func() (bool, string) {
		c := meta.FindStatusCondition(h.ers(e.Status.Canary.ReplicaSet).Status.Conditions, v1.ConditionPodCannotStart)
		if c == nil || c.Status != metav1.ConditionTrue {
			return false, fmt.Sprintf("%+v", c)
		}
		msg = c.Message
		return true, ""
	})
	if !strings.HasPrefix(msg, "Pod agent-") || !strings.HasSuffix(msg, " cannot start with reason: "+reason) {
		t.Errorf("PodCannotStart message %q, want DataDog's \"Pod <name> cannot start with reason: %s\"", msg, reason)
	}
}

package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/assign"
)

// TestBadInput: a selector that matches nothing, duplicate jobs, a dedicated
// job not in the list, a missing job list. Each gives the Invalid condition
// with its reason and a Warning Event, and leaves the assignment in force
// untouched; fixing the spec clears it. (Too few workers for the dedicated
// jobs is no bad input: TestLosingWorkersDoesNotFreeze.)
func TestBadInput(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, true)
	jobs := jobNames(0, 12)
	p.createSwarm(swarmv1.SwarmSpec{Jobs: jobs, Refresh: swarmv1.RefreshReload})
	p.waitInvalid(ReasonNoWorkload)
	p.statefulSet(3)
	p.converged(3)
	good, rv := p.config()
	for _, tc := range []struct {
		reason string
		edit   func(*swarmv1.SwarmSpec)
	}{
		{assign.ReasonDuplicateJob, func(s *swarmv1.SwarmSpec) { s.Jobs = append(jobNames(0, 12), "stream-03") }},
		{assign.ReasonUnknownDedicated, func(s *swarmv1.SwarmSpec) { s.Jobs, s.Dedicated = jobs, []string{"stream-99"} }},
		{ReasonJobsNotFound, func(s *swarmv1.SwarmSpec) {
			s.Jobs, s.Dedicated, s.JobsFrom = nil, nil, &swarmv1.JobsSource{ConfigMap: "missing"}
		}},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			p.editSwarm(tc.edit)
			sw := p.waitInvalid(tc.reason)
			if cfg, now := p.config(); now != rv || !cfg.Equal(good) {
				t.Errorf("the workers' ConfigMap changed on a bad spec: %+v", cfg)
			}
			if sw.Status.Version != good.Version || sw.Status.WorkerCount != 3 {
				t.Errorf("the status lost the assignment in force: %+v", sw.Status)
			}
			p.waitEvent(tc.reason)
		})
	}
	p.editSwarm(func(s *swarmv1.SwarmSpec) { s.Jobs, s.JobsFrom, s.Dedicated = jobs, nil, []string{"stream-05"} })
	p.converged(3)
	cfg := p.check(jobs, "stream-05")
	for w, share := range cfg.Workloads {
		if len(share.Jobs) == 1 && share.Jobs[0] == "stream-05" {
			t.Logf("stream-05 runs alone on %s", w)
			return
		}
	}
	t.Errorf("dedicated stream-05 does not run alone: %+v", cfg.Workloads)
}

// TestJobsFromConfigMap: the job list read from a ConfigMap key (one per
// line), and an edit of that ConfigMap reassigned.
func TestJobsFromConfigMap(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, true)
	list := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "streams", Namespace: p.ns},
		Data: map[string]string{"jobs": "# cameras\n" + strings.Join(jobNames(0, 10), "\n") + "\n"}}
	if _, err := p.kube.CoreV1().ConfigMaps(p.ns).Create(context.Background(), list, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.statefulSet(3)
	p.createSwarm(swarmv1.SwarmSpec{JobsFrom: &swarmv1.JobsSource{ConfigMap: "streams"}, Refresh: swarmv1.RefreshReload})
	p.converged(3)
	p.check(jobNames(0, 10))
	list.Data["jobs"] = "- " + strings.Join(jobNames(2, 14), "\n- ") + "\n"
	if _, err := p.kube.CoreV1().ConfigMaps(p.ns).Update(context.Background(), list, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the edited list assigned", func(sw *swarmv1.Swarm) bool { return sw.Status.Jobs == 12 })
	p.converged(3)
	p.check(jobNames(2, 14))
}

func (p *pool) waitInvalid(reason string) *swarmv1.Swarm {
	p.t.Helper()
	return p.waitFor("Invalid="+reason, func(sw *swarmv1.Swarm) bool {
		c := meta.FindStatusCondition(sw.Status.Conditions, swarmv1.ConditionInvalid)
		return sw.Status.ObservedGeneration == sw.Generation && c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason
	})
}

func (p *pool) waitEvent(reason string) {
	p.t.Helper()
	p.waitFor("a "+reason+" Event", func(*swarmv1.Swarm) bool {
		l, err := p.kube.CoreV1().Events(p.ns).List(context.Background(),
			metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", reason).String()})
		return err == nil && len(l.Items) > 0 && l.Items[0].Type == "Warning"
	})
}

// TestDeploymentPodReplaced: a Deployment's pod that dies comes back under
// a new name; its jobs, and only those, move to the newcomer.
func TestDeploymentPodReplaced(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, true)
	jobs := jobNames(0, 30)
	labels := map[string]string{"app": "dep-worker"}
	three := int32(3)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: p.ns, Labels: map[string]string{"swarm": "work"}},
		Spec:       appsv1.DeploymentSpec{Replicas: &three, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: podTemplate(labels)},
	}
	if _, err := p.kube.AppsV1().Deployments(p.ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.createSwarm(swarmv1.SwarmSpec{Jobs: jobs, Refresh: swarmv1.RefreshReload})
	p.converged(3)
	before := p.check(jobs)
	var victim string
	for w := range before.Workloads {
		victim = w
	}
	if err := p.kube.CoreV1().Pods(p.ns).Delete(context.Background(), victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sw := p.waitFor("the replacement assigned", func(sw *swarmv1.Swarm) bool {
		cfg, _ := p.config()
		_, old := cfg.Workloads[victim]
		return cfg.Version > before.Version && !old && meta.IsStatusConditionTrue(sw.Status.Conditions, swarmv1.ConditionConverged)
	})
	after := p.check(jobs)
	if want := int32(len(before.Workloads[victim].Jobs)); sw.Status.Moved != want {
		t.Errorf("moved %d jobs, want the %d of the lost pod", sw.Status.Moved, want)
	}
	for w, share := range before.Workloads {
		if w != victim && fmt.Sprint(after.Workloads[w].Jobs) != fmt.Sprint(share.Jobs) {
			t.Errorf("worker %s's share changed: %v -> %v", w, share.Jobs, after.Workloads[w].Jobs)
		}
	}
}

// TestConfigMapNotOwned: a Swarm whose spec.configMap names a ConfigMap
// that exists and is not its own (a user's, unlabelled and unowned) turns
// Invalid with ConfigMapNotOwned and a Warning Event, and the ConfigMap is
// left as it was (the controller's policy would refuse the takeover; the
// controller does not try it in a loop). Naming another ConfigMap clears it.
func TestConfigMapNotOwned(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, true)
	users := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "users-settings", Namespace: p.ns}, Data: map[string]string{"a": "b"}}
	users, err := p.kube.CoreV1().ConfigMaps(p.ns).Create(context.Background(), users, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.statefulSet(2)
	p.createSwarm(swarmv1.SwarmSpec{Jobs: jobNames(0, 4), ConfigMap: "users-settings", Refresh: swarmv1.RefreshReload})
	sw := p.waitInvalid(ReasonConfigNotOwned)
	if c := meta.FindStatusCondition(sw.Status.Conditions, swarmv1.ConditionInvalid); !strings.Contains(c.Message, "users-settings") {
		t.Errorf("the condition does not name the ConfigMap: %q", c.Message)
	}
	p.waitEvent(ReasonConfigNotOwned)
	now, err := p.kube.CoreV1().ConfigMaps(p.ns).Get(context.Background(), "users-settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.ResourceVersion != users.ResourceVersion {
		t.Errorf("the user's ConfigMap was written: labels %v, owners %v, data %v", now.Labels, now.OwnerReferences, now.Data)
	}
	p.editSwarm(func(s *swarmv1.SwarmSpec) { s.ConfigMap = "" })
	p.converged(2)
}

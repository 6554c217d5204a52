package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
)

// TestTooLargeIsReported: a share the API server refuses (a pod's
// annotations are capped at 256 KiB; here one worker's share of 1,400 long
// job names, 290 KB) is reported, Converged=False TooLarge and a Warning
// Event, not retried on every event nor reported Converged; a second worker
// halves the shares, which then fit, and the pool converges.
func TestTooLargeIsReported(t *testing.T) {
	p := newPool(t, true)
	var jobs []string
	for i := range 1400 {
		jobs = append(jobs, fmt.Sprintf("job-%04d-%s", i, strings.Repeat("x", 190)))
	}
	list := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "long", Namespace: p.ns},
		Data: map[string]string{"jobs": strings.Join(jobs, "\n")}}
	if _, err := p.kube.CoreV1().ConfigMaps(p.ns).Create(context.Background(), list, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.statefulSet(1)
	p.createSwarm(swarmv1.SwarmSpec{JobsFrom: &swarmv1.JobsSource{ConfigMap: "long"}, Refresh: swarmv1.RefreshReload})
	sw := p.waitFor("Converged=False TooLarge", func(sw *swarmv1.Swarm) bool {
		return hasReason(sw, swarmv1.ConditionConverged, ReasonTooLarge)
	})
	if c := meta.FindStatusCondition(sw.Status.Conditions, swarmv1.ConditionConverged); c.Status != metav1.ConditionFalse {
		t.Errorf("Converged: %+v", c)
	}
	p.waitEvent(ReasonTooLarge)
	t.Logf("reported: %s", meta.FindStatusCondition(sw.Status.Conditions, swarmv1.ConditionConverged).Message)
	p.scale(2)
	p.converged(2)
	p.check(jobs)
}

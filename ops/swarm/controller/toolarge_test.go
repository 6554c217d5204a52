package controller

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/config"
)

// TestTooLargeIsReported: a share the API server refuses (a pod's
// annotations are capped at 256 KiB; here one worker's share of 1,400 long
// job names, 290 KB) is reported, Converged=False TooLarge and a Warning
// Event, not retried on every event nor reported Converged; a second worker
// halves the shares, which then fit, and the pool converges.
func TestTooLargeIsReported(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
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

// TestTooLargeRecordIsReported: a Swarm whose record (the workers'
// ConfigMap, the whole assignment gzipped) passes the API server's 1 MiB
// (29,500 job names of 48 random characters, which gzip cannot shrink much)
// is reported Converged=False TooLarge with a message and a Warning Event
// that name the ConfigMap and the job count, and gives no worker a share
// rather than shares the record does not back.
func TestTooLargeRecordIsReported(t *testing.T) {
	t.Parallel() // a namespace of its own (see TestMain)
	p := newPool(t, true)
	r := rand.New(rand.NewPCG(1, 2))
	jobs := make([]string, 29_500)
	for i := range jobs {
		b := make([]byte, 36)
		for k := range b {
			b[k] = byte(r.Uint32())
		}
		jobs[i] = "j" + base64.RawURLEncoding.EncodeToString(b)[:47]
	}
	p.statefulSet(2)
	p.createSwarm(swarmv1.SwarmSpec{Jobs: jobs, Refresh: swarmv1.RefreshReload})
	sw := p.waitFor("Converged=False TooLarge", func(sw *swarmv1.Swarm) bool {
		return hasReason(sw, swarmv1.ConditionConverged, ReasonTooLarge)
	})
	msg := meta.FindStatusCondition(sw.Status.Conditions, swarmv1.ConditionConverged).Message
	for _, want := range []string{"workers' ConfigMap", "29500 jobs", "split the jobs"} {
		if !strings.Contains(msg, want) {
			t.Errorf("TooLarge message %q does not say %q", msg, want)
		}
	}
	p.waitEvent(ReasonTooLarge)
	pods, err := p.kube.CoreV1().Pods(p.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods.Items {
		if s, ok := pod.Annotations[config.ShareAnnotation]; ok {
			t.Errorf("pod %s has a share (%d bytes) though the record was refused", pod.Name, len(s))
		}
	}
	t.Logf("reported: %s", msg)
}

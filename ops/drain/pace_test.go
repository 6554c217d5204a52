package drain

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/testenv"
)

// evictionCounter counts the eviction requests that reach the API server.
type evictionCounter struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (c *evictionCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/eviction") {
		c.n.Add(1)
	}
	return c.next.RoundTrip(r)
}

// TestBlockedEvictionRetriedAtTheDrainsPace: an eviction a PDB refuses
// (429 with Retry-After: 10) comes back to the drain at once, which asks
// again every RetryInterval. client-go would otherwise wait out the
// Retry-After and ask again itself, up to ten times: one call could take
// 100 s, past the drain's timeout, and a slot guard in the transport would
// confirm the slot only every 10 s.
func TestBlockedEvictionRetriedAtTheDrainsPace(t *testing.T) {
	c := client(t)
	ns := namespace(t, c)
	makeNode(t, c, "drain-pace", false)
	makePod(t, c, ns, "web-1", "drain-pace", "ReplicaSet")
	one := intstr.FromInt32(1)
	// Not processed by a disruption controller (none runs here): the API
	// server refuses with 429 and Retry-After: 10, as it does for a budget
	// it cannot compute yet.
	if _, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(testenv.Need(t, env).Config)
	counter := &evictionCounter{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	slow, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Drain(context.Background(), slow, "drain-pace", Options{Timeout: 3 * time.Second, GracePeriodSeconds: &zero,
		RetryInterval: 300 * time.Millisecond})
	took := time.Since(start)
	if !errors.Is(err, ErrBlocked) {
		t.Fatalf("Drain = %v, want ErrBlocked", err)
	}
	if n := counter.n.Load(); n < 3 {
		t.Errorf("%d eviction requests in a drain of %s with RetryInterval 300ms: the drain did not retry at its own pace", n, took.Round(time.Millisecond))
	}
	if took > 8*time.Second {
		t.Errorf("a drain with a 3 s timeout took %s", took.Round(time.Millisecond))
	}
}

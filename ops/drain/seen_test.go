package drain

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/testenv"
)

// counted is a client that counts its GETs of one Node.
func counted(t *testing.T, gets *atomic.Int64) *kube.Clientset {
	t.Helper()
	cfg := rest.CopyConfig(testenv.Need(t, env).Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/v1/nodes/") {
				gets.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	c, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A copy that is the latest saves the read: one write each way, and the
// Node written is returned (its resource version is the caller's record).
func TestSeenCopySavesTheRead(t *testing.T) {
	c, ctx := client(t), context.Background()
	makeNode(t, c, "seen-a", false)
	var gets atomic.Int64
	sc := counted(t, &gets)
	written, err := CordonSeen(ctx, sc, "seen-a", getNode(t, c, "seen-a"), "slipway-agent", map[string]string{"x": "1"})
	if err != nil || written == nil {
		t.Fatalf("CordonSeen = %v, %v", written, err)
	}
	if n := getNode(t, c, "seen-a"); written.ResourceVersion != n.ResourceVersion || !n.Spec.Unschedulable || n.Annotations["x"] != "1" {
		t.Fatalf("written at %s, the Node at %s: unschedulable=%v annotations=%v", written.ResourceVersion, n.ResourceVersion, n.Spec.Unschedulable, n.Annotations)
	}
	back, err := UncordonSeen(ctx, sc, "seen-a", written, "slipway-agent", Meta{Annotations: map[string]any{"x": nil}})
	if err != nil || back == nil || back.Spec.Unschedulable || back.Annotations["x"] != "" || back.Annotations[AnnotationCordonedBy] != "" {
		t.Fatalf("UncordonSeen = %v, %v", back, err)
	}
	if g := gets.Load(); g != 0 {
		t.Errorf("%d GETs of the Node with a copy that was the latest; want 0", g)
	}
}

// A stale copy never decides: an admin cordoned the node after the copy
// was taken, so the cordon must record that the node was not schedulable
// before (else the uncordon would lift the admin's cordon).
func TestSeenCopyStaleIsReadAgain(t *testing.T) {
	c, ctx := client(t), context.Background()
	makeNode(t, c, "seen-b", false)
	stale := getNode(t, c, "seen-b")
	if _, err := c.CoreV1().Nodes().Patch(ctx, "seen-b", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := CordonSeen(ctx, slim(t), "seen-b", stale, "slipway-agent"); err != nil {
		t.Fatal(err)
	}
	if n := getNode(t, c, "seen-b"); n.Annotations[AnnotationSchedulableBefore] != "false" {
		t.Fatalf("schedulable-before %q after an admin's cordon the copy did not show; want false", n.Annotations[AnnotationSchedulableBefore])
	}
	// A copy from before the cordon says there is nothing to lift: read again.
	makeNode(t, c, "seen-c", false)
	before := getNode(t, c, "seen-c")
	if err := Cordon(ctx, slim(t), "seen-c", "slipway-agent"); err != nil {
		t.Fatal(err)
	}
	written, err := UncordonSeen(ctx, slim(t), "seen-c", before, "slipway-agent")
	if err != nil || written == nil {
		t.Fatalf("UncordonSeen with a copy from before the cordon = %v, %v; want the cordon lifted", written, err)
	}
	if n := getNode(t, c, "seen-c"); n.Spec.Unschedulable {
		t.Fatal("still cordoned")
	}
}

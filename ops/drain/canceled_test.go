package drain

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A cordon or an uncordon whose context has ended is not made, and says
// so: client-go's retry on conflict used to return no error for it (and
// an empty Node as written), so a leader stopping mid-uncordon took the
// cordon for lifted.
func TestEndedContextIsAnError(t *testing.T) {
	c := client(t)
	makeNode(t, c, "ended-a", false)
	t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), "ended-a", metav1.DeleteOptions{}) })
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if written, err := CordonSeen(ended, slim(t), "ended-a", getNode(t, c, "ended-a"), "slipway-agent"); !errors.Is(err, context.Canceled) || written != nil && written.Name != "" {
		t.Fatalf("CordonSeen with an ended context = %v, %v; want context.Canceled", written, err)
	}
	if err := Cordon(context.Background(), slim(t), "ended-a", "slipway-agent"); err != nil {
		t.Fatal(err)
	}
	if written, err := UncordonSeen(ended, slim(t), "ended-a", getNode(t, c, "ended-a"), "slipway-agent"); !errors.Is(err, context.Canceled) || written != nil && written.Name != "" {
		t.Fatalf("UncordonSeen with an ended context = %v, %v; want context.Canceled", written, err)
	}
	if n := getNode(t, c, "ended-a"); !n.Spec.Unschedulable {
		t.Fatal("uncordoned with an ended context")
	}
}

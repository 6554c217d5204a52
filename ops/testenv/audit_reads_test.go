package testenv

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestAuditGetsKeepsNodeListsAndWatches starts a control plane whose
// audit log keeps Node LISTs and watches (AuditGets with Verbs), lists
// the Nodes, opens and ends a watch of one, and reads both back, with
// their request URIs.
func TestAuditGetsKeepsNodeListsAndWatches(t *testing.T) {
	t.Parallel() // a control plane of its own: nothing shared with the package's cluster or another test
	if cluster == nil {
		t.Skip("no control plane: SLIPWAY_SKIP_CLUSTER=1 or -short")
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "audit.log")
	e, err := Start(context.Background(), Options{ToolsDir: cluster.opts.ToolsDir, AuditLog: log,
		AuditGets: []AuditGets{{Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=one"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	w.Stop()
	var list, watch bool
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !(list && watch); time.Sleep(500 * time.Millisecond) {
		events, err := ReadAuditAll(log)
		if err != nil {
			continue
		}
		for _, ev := range events {
			if ev.Resource != "nodes" {
				continue
			}
			list = list || ev.Verb == "list" && ev.Name == ""
			// A watch by metadata.name: the entry names the Node.
			watch = watch || ev.Verb == "watch" && ev.Name == "one" && ev.RequestURI != "" && ev.Received.Before(ev.Time)
		}
	}
	if !list || !watch {
		t.Errorf("the audit log kept a Node LIST: %v, an ended Node watch with its URI: %v", list, watch)
	}
}

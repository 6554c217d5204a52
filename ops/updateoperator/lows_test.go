package updateoperator

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/testenv"
)

// The agent tells that its reboot happened from the host's boot ID, not
// from the Node's status: a kubelet that has not written the new boot ID
// yet (here: never) does not hold the node at rebooting, and a node
// neither labelled nor served by an agent is left unwritten.
func TestAgentReadsItsBootIDFromTheHost(t *testing.T) {
	f := newFleetOn(t, env, "bootid")
	f.staleStatusBootID = true
	f.addNode("bootid-0", true)
	f.addNode("bootid-1", false)
	bare := "bootid-bare" // no agent, no label
	if _, err := f.kube.CoreV1().Nodes().Create(context.Background(), testenv.FakeNode(bare), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), bare, metav1.DeleteOptions{}) })
	stop := f.controller(nil)
	defer stop()
	eventually(t, 2*time.Minute, "every node at v2", f.done)
	for k := range f.node(bare).Annotations {
		if len(k) > len(f.prefix) && k[:len(f.prefix)] == f.prefix {
			t.Errorf("the controller wrote %s on a node no agent serves", k)
		}
	}
}

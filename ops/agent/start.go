package agent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// The agent's start is on the path of every slot: after its node's reboot
// the slot ends only once a new process has asked the API server's
// version, read its Node and its NodeUpdate and filled its caches. Once
// the server is known supported (before that the agent asks it nothing
// else), the rest goes side by side rather than one after the other: the
// Node and the NodeUpdate are read together, and the publish of the boot's
// versions that needs them runs beside the informers' first lists. The
// workers start once both the publish and the caches are done.

// ownReads is this node's Node and NodeUpdate as read at start.
type ownReads struct {
	node   *corev1.Node
	object *v1.NodeUpdate
	err    error
}

// readOwn reads this node's Node and NodeUpdate from the API server, side by side.
func (a *Agent) readOwn(ctx context.Context) ownReads {
	objects := make(chan ownReads, 1)
	go func() {
		u, err := a.objectFromServer(ctx)
		objects <- ownReads{object: u, err: err}
	}()
	n, err := a.kube.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	o := <-objects
	if err != nil {
		return ownReads{err: fmt.Errorf("read this agent's node %s (is --node-name right?): %w", a.opts.NodeName, err)}
	}
	if o.err != nil {
		return o
	}
	return ownReads{node: n, object: o.object}
}

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/answer"
)

// The agent's start is on the path of every slot: after its node's reboot
// the slot ends only once a new process has asked the API server's
// version, read its Node and its NodeUpdate and filled its caches. Once
// the server is known supported (before that the agent asks it nothing
// else), the rest goes side by side rather than one after the other: the
// Node and the NodeUpdate are read together, and the publish of the boot's
// versions that needs them runs beside the informers' first lists. The
// workers start once both the publish and the caches are done.
//
// A start step that gets no answer (a busy API server's 429, a timeout, a
// dropped connection) is asked again in this process (untilAnswered): an
// agent that exited would be restarted by the kubelet and list its Node,
// its NodeUpdate, its Jobs and its pods again, and a fleet of agents
// restarting together is the load that kept the API server busy.

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

// startBackoff paces a start step asked again: 1 s, doubling to 30 s,
// each wait drawn within half of it either way so a fleet's agents spread.
var startBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: 30 * time.Second}

// untilAnswered runs step until it succeeds, fails with the API server's
// answer (answer.Unanswered is false: forbidden, not found, invalid), or
// ctx ends; a step without an answer waits (b's next step) and runs again.
func untilAnswered(ctx context.Context, log *slog.Logger, b wait.Backoff, what string, step func(context.Context) error) error {
	for {
		err := step(ctx)
		if err == nil || !answer.Unanswered(err) || ctx.Err() != nil {
			return err
		}
		d := b.Step()
		log.Warn("no answer from the API server; asking again in this process", "step", what, "after", d.Round(time.Millisecond), "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(d):
		}
	}
}

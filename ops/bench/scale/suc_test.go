package scale

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/bench/sucproc"
	"slipway.dev/slipway/ops/testenv"
)

// SUC runs as in ops/e2e/suc (ops/bench/sucproc): its install manifest's
// settings, a local process with the admin kubeconfig, registering its own
// Plan CRD.
const cordonCommand = `kubectl cordon "$NODE_NAME" >/dev/null`

// rebootCommand is the reboot plan's: cordon, and a simulated reboot at 0 s
// downtime (the supervisor's, as slipway's agents reboot) that the pod waits
// through: `slipway-sim reboot --wait` answers once the node is Ready again
// with its new boot ID. Polling the Node's boot ID instead loses the race
// with kwok, whose status write from an older copy of the Node can put the
// old boot ID back before the pod reads it (docs/bench.md, "SUC rebooting
// too"). A real SUC upgrade pod dies with the reboot and the Job's next pod
// finds the node upgraded; waiting through it spares SUC that second pod (as
// ops/e2e/suc's staged shape does).
const rebootCommand = cordonCommand + ` && slipway-sim reboot --socket "$SLIPWAY_SCALE_SOCKET" --delay 0s --wait >/dev/null`

// startSUC starts SUC and returns its pid once its Plan CRD serves; it is
// stopped when b ends.
func startSUC(b *testing.B, e *testenv.Env) int {
	c, err := sucproc.Start(context.Background(), sucproc.Options{Bin: sucBin, Kubeconfig: e.Kubeconfig, Dir: e.Dir,
		Kube: kubernetes.NewForConfigOrDie(e.Config), Dyn: dynClient(e)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Stop)
	return c.Pid()
}

// sucPlan is SUC's plan: cordon (by its Job, as its init container would),
// nothing or the reboot (sucReboot), and SUC uncordons and labels the node.
func sucPlan() *unstructured.Unstructured {
	command := cordonCommand
	if sucReboot {
		command = rebootCommand
	}
	p := sucproc.Plan{Name: "noop", Concurrency: concurrency, Cordon: true, Command: []string{"sh", "-c", command}}
	if rolled < nodes {
		p.NodeLabel = rollLabel
	}
	return p.Object()
}

// sucDone tells whether every node is labelled at the plan's hash and schedulable.
// The nodes come from the extra watcher's cache: polling a list of every
// Node would add the harness's reads to SUC's.
func sucDone(ctx context.Context, e *testenv.Env, w *nodeWatcher) func() (bool, error) {
	dyn := dynamic.NewForConfigOrDie(e.Config)
	return func() (bool, error) {
		p, err := dyn.Resource(sucproc.PlanGVR).Namespace(sucproc.Namespace).Get(ctx, "noop", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		hash, _, _ := unstructured.NestedString(p.Object, "status", "latestHash")
		if hash == "" {
			return false, fmt.Errorf("the plan has no latestHash yet")
		}
		done := 0
		for _, n := range w.nodes() {
			if _, worker := n.Labels[testenv.NodeRoleLabel]; worker && n.Labels[sucproc.PlanLabelPrefix+"noop"] == hash && !n.Spec.Unschedulable {
				done++
			}
		}
		return done == rolled, fmt.Errorf("%d of %d nodes done", done, rolled)
	}
}

// waitFor polls cond every 2 s until it holds or timeout passes.
func waitFor(b *testing.B, timeout time.Duration, what string, cond func() (bool, error)) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, err)
		}
		time.Sleep(2 * time.Second)
	}
}

func dynClient(e *testenv.Env) dynamic.Interface { return dynamic.NewForConfigOrDie(e.Config) }

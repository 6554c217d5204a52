package updateoperator

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/updateoperator/platform"
)

// A host going down stops the agent and its reboot command together
// (SIGTERM to every process of the container): the command fails a moment
// before the agent sees its own stop. The agent must not report that as a
// failed reboot: the controller would fail the node, lift its cordon and
// free its slot while it reboots (TestSIGKILLChaos saw max-concurrent + 1
// nodes disrupted so). The node stays at rebooting.
func TestRebootCallStoppedWithTheAgentIsNoFailure(t *testing.T) {
	f := newFleet(t, "rebootstop", 0)
	name := "rebootstop-0"
	if _, err := f.kube.CoreV1().Nodes().Create(context.Background(), testenv.FakeNode(name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	f.patch(name, map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		f.keys.Wanted(): string(IntentReboot), f.keys.Active(): string(IntentPerform), f.keys.State(): string(StateReady)}}})
	ctx, cancel := context.WithCancel(context.Background())
	p := &stoppedReboot{stop: func() { time.AfterFunc(time.Second, cancel) }}
	done := make(chan error, 1)
	go func() {
		done <- RunAgent(ctx, AgentOptions{Config: f.env.Config, Prefix: f.prefix, NodeName: name, Platform: p,
			Resync: 200 * time.Millisecond, Log: f.log})
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		cancel()
		t.Fatal("the agent did not stop")
	}
	v := f.keys.View(f.node(name), "")
	if v.Active != IntentReboot || v.State != StateRebooting {
		t.Errorf("after a reboot call ended by the host going down: active %s, state %s (reason %q); want %s, %s",
			v.Active, v.State, f.node(name).Annotations[f.keys.Key(KeyReason)], IntentReboot, StateRebooting)
	}
}

// stoppedReboot is a host whose reboot command is killed by the host's
// shutdown: it fails, and the agent is stopped a moment later.
type stoppedReboot struct {
	platform.Platform
	stop func()
}

func (s *stoppedReboot) Reboot(context.Context) error {
	s.stop()
	return errors.New("run the reboot command: signal: terminated")
}

package updateoperator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/updateoperator/platform"
	"slipway.dev/slipway/upgrade/layout"
)

// failPerformOnce is a host whose first perform-update fails; it records
// whether each reset left the staged release behind.
type failPerformOnce struct {
	platform.Platform
	staged string // the folder prepare stages
	mu     sync.Mutex
	failed bool
	resets []bool // per reset: the staged folder gone afterwards
	prep   int
}

func (p *failPerformOnce) Prepare(ctx context.Context) error {
	p.mu.Lock()
	p.prep++
	p.mu.Unlock()
	return p.Platform.Prepare(ctx)
}

func (p *failPerformOnce) Perform(ctx context.Context) error {
	p.mu.Lock()
	first := !p.failed
	p.failed = true
	p.mu.Unlock()
	if first {
		return errors.New("the boot loader refused the new entry (planted failure)")
	}
	return p.Platform.Perform(ctx)
}

func (p *failPerformOnce) Reset(ctx context.Context) error {
	err := p.Platform.Reset(ctx)
	_, serr := os.Stat(p.staged)
	p.mu.Lock()
	p.resets = append(p.resets, os.IsNotExist(serr))
	p.mu.Unlock()
	return err
}

// A node whose perform-update fails goes error -> reset-state (the agent
// discards the staged release from its real system directory) -> ready ->
// stabilize, and is tried again after its backoff, this time to the end.
func TestFailedUpdateIsResetThenRetried(t *testing.T) {
	f := newFleet(t, "reset", 1)
	name := f.nodes[0]
	f.stopAgent(name)
	host := &failPerformOnce{Platform: f.plats[name], staged: layout.New(f.plats[name].(*platform.Slipway).SystemDir).VersionDir(layout.Rootfs, "v2")}
	f.plats[name] = host
	f.startAgent(name)
	seen := f.record(name)
	reasons := f.recordWith(name, f.keys.Key(KeyReason))
	stop := f.controller(nil)
	defer stop()
	eventually(t, 90*time.Second, "the node at v2 after a failure and a reset", f.done)
	steps := seen()
	// While it waits out its backoff, the node says why it failed, in the
	// host's words: neither the reset's acknowledgement nor the check after
	// it removes the controller's reason (both did, within milliseconds).
	const waiting = "stabilize/stabilize/update-available: perform-update failed on the host: the boot loader refused the new entry (planted failure)"
	if r := reasons(); !slices.Contains(r, waiting) {
		t.Errorf("the node went %q;\nwant it to rest at %q", r, waiting)
	}
	want := []string{"perform-update/perform-update/error", "reset-state/reset-state/busy", "reset-state/reset-state/ready",
		"stabilize/stabilize/update-available", "prepare-update/prepare-update/ready", "reboot-update/reboot-update/ready", "stabilize/stabilize/up-to-date"}
	if !inOrder(steps, want) {
		t.Errorf("the node went %v;\nwant in this order %v", steps, want)
	}
	host.mu.Lock()
	defer host.mu.Unlock()
	if len(host.resets) != 1 || !host.resets[0] {
		t.Errorf("resets %v: want one, which removed the staged %s", host.resets, host.staged)
	}
	if host.prep != 2 {
		t.Errorf("prepared %d times, want 2 (the retry stages again what the reset removed)", host.prep)
	}
	if n := f.node(name); n.Annotations[f.keys.Key(KeyFailures)] != "" {
		t.Errorf("failures %q left after the successful retry", n.Annotations[f.keys.Key(KeyFailures)])
	}
	if !f.eventSaid(name, ReasonFailed) {
		t.Errorf("no %s Event for the failure: %v", ReasonFailed, f.eventReasons(name))
	}
}

// record watches node and keeps its distinct wanted/active/state steps, in
// order (a watch sees every write); the returned func stops and gives them.
func (f *fleet) record(node string) func() []string {
	return f.recordWith(node, "")
}

// recordWith is record with the value of the annotation key (when not "")
// after each step: "wanted/active/state: value".
func (f *fleet) recordWith(node, key string) func() []string {
	ctx, cancel := context.WithCancel(context.Background())
	w, err := f.kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
	if err != nil {
		f.t.Fatal(err)
	}
	var steps []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			v := f.keys.View(n, "")
			s := fmt.Sprintf("%s/%s/%s", v.Wanted, v.Active, v.State)
			if key != "" {
				s += ": " + n.Annotations[key]
			}
			if len(steps) == 0 || steps[len(steps)-1] != s {
				steps = append(steps, s)
			}
		}
	}()
	return func() []string {
		cancel()
		w.Stop()
		<-done
		return steps
	}
}

// inOrder reports whether want occurs in got in order (not necessarily adjacent).
func inOrder(got, want []string) bool {
	i := 0
	for _, s := range got {
		if i < len(want) && strings.EqualFold(s, want[i]) {
			i++
		}
	}
	return i == len(want)
}

// failRebootOnce is a slipway host whose first reboot call fails after the
// perform moved its links; it records what `current` named after each reset.
type failRebootOnce struct {
	*platform.Slipway
	mu      sync.Mutex
	failed  bool
	current []string // per reset
}

func (p *failRebootOnce) Reboot(ctx context.Context) error {
	p.mu.Lock()
	first := !p.failed
	p.failed = true
	p.mu.Unlock()
	if first {
		return errors.New("the init system refused the reboot (planted failure)")
	}
	return p.Slipway.Reboot(ctx)
}

func (p *failRebootOnce) Reset(ctx context.Context) error {
	err := p.Slipway.Reset(ctx)
	cur, _ := layout.New(p.SystemDir).Current(layout.Rootfs)
	p.mu.Lock()
	p.current = append(p.current, cur)
	p.mu.Unlock()
	return err
}

// A failure after perform-update (here the reboot call) is undone by the
// reset: `current` names the running v1 again, the node reports
// update-available at v1 (not up to date at the v2 it never booted), and
// it is retried and really rebooted into v2.
func TestFailureAfterPerformIsUndoneAndRetried(t *testing.T) {
	f := newFleet(t, "undo", 1)
	name := f.nodes[0]
	f.stopAgent(name)
	host := &failRebootOnce{Slipway: f.plats[name].(*platform.Slipway)}
	f.plats[name] = host
	f.startAgent(name)
	seen := f.record(name)
	stop := f.controller(nil)
	defer stop()
	eventually(t, 90*time.Second, "the node rebooted into v2 after a failed reboot and a reset", func() (bool, string) {
		f.mu.Lock()
		reboots := f.reboots[name]
		f.mu.Unlock()
		ok, why := f.done()
		n := f.node(name)
		return ok && reboots == 1, fmt.Sprintf("%s; %d reboots; current-version %s", why, reboots, n.Annotations[f.keys.Key(KeyCurrentVersion)])
	})
	steps := seen()
	want := []string{"reboot-update/reboot-update/error", "reset-state/reset-state/ready", "stabilize/stabilize/update-available",
		"prepare-update/prepare-update/ready", "reboot-update/reboot-update/ready", "stabilize/stabilize/up-to-date"}
	if !inOrder(steps, want) {
		t.Errorf("the node went %v;\nwant in this order %v", steps, want)
	}
	host.mu.Lock()
	defer host.mu.Unlock()
	if len(host.current) != 1 || host.current[0] != "v1" {
		t.Errorf("current after each reset: %v; want one reset that pointed it back at the running v1", host.current)
	}
}

// hangPrepareOnce is a host whose first prepare never returns (a held
// update lock, a command that never exits) until its caller gives up.
type hangPrepareOnce struct {
	platform.Platform
	mu   sync.Mutex
	hung bool
}

func (p *hangPrepareOnce) Prepare(ctx context.Context) error {
	p.mu.Lock()
	first := !p.hung
	p.hung = true
	p.mu.Unlock()
	if first {
		<-ctx.Done()
		return fmt.Errorf("prepare: %w", ctx.Err())
	}
	return p.Platform.Prepare(ctx)
}

// A host call that hangs ends at the agent's --step-timeout: the node
// reports prepare-update/error with the reason (instead of leaving the
// rollout silently, its agent stuck in the call), is reset and retried.
func TestHungHostCallEndsInError(t *testing.T) {
	f := newFleet(t, "hung", 1)
	name := f.nodes[0]
	f.stopAgent(name)
	f.stepTimeout = 2 * time.Second
	f.plats[name] = &hangPrepareOnce{Platform: f.plats[name]}
	f.startAgent(name)
	reasons := f.seen(name, f.keys.Key(KeyReason))
	stop := f.controller(nil)
	defer stop()
	eventually(t, 90*time.Second, "the node at v2 after its hung prepare", f.done)
	var said bool
	for _, r := range reasons() {
		said = said || strings.Contains(r, "--step-timeout")
	}
	if !said {
		t.Errorf("reasons %q; want one naming --step-timeout", reasons())
	}
}

package updateoperator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/updateoperator/platform"
	"slipway.dev/slipway/upgrade/releasetest"
)

// A cluster the old operator (dogswatch, Go brupop) leaves in each of its
// states is taken over: at rest (its `ready` with update-available), mid
// prepare (busy), mid reboot (acknowledged busy, the host rebooted into
// the update already), cordoned by it (no record of whose cordon) before
// its reboot, and in error. Every node ends updated once, none rebooted
// twice, none left cordoned.
func TestMigrationFromTheOldOperator(t *testing.T) {
	f := newFleetOn(t, testenv.Need(t, env), "migrate")
	for i := range 5 {
		f.addNode(fmt.Sprintf("migrate-%d", i), false)
	}
	rest, preparing, rebooted, cordoned, failed := f.nodes[0], f.nodes[1], f.nodes[2], f.nodes[3], f.nodes[4]
	f.stopAll()
	f.mu.Lock()
	f.closed = false
	f.mu.Unlock()
	ctx := context.Background()
	state := func(node string, wanted, active Intent, st State, more map[string]any) {
		ann := map[string]any{f.keys.Wanted(): string(wanted), f.keys.Active(): string(active), f.keys.State(): string(st)}
		for k, v := range more {
			ann[k] = v
		}
		f.patch(node, map[string]any{"metadata": map[string]any{"annotations": ann}})
	}
	cordon := func(node string) { f.patch(node, map[string]any{"spec": map[string]any{"unschedulable": true}}) }
	// The hosts the old operator left mid-update: activated (and, for one, rebooted into it).
	for _, node := range []string{rebooted, cordoned} {
		activateOnHost(t, ctx, f.plats[node]) // the old agent activated it (perform-update ready)
	}
	f.setBootID(rebooted) // the old operator's reboot
	f.mu.Lock()
	f.reboots[rebooted]++
	f.mu.Unlock()
	state(rest, IntentStabilize, IntentStabilize, StateReady, map[string]any{f.keys.UpdateAvailable(): "true"})
	state(preparing, IntentPrepare, IntentPrepare, StateBusy, nil)
	state(rebooted, IntentReboot, IntentReboot, StateBusy, nil)
	cordon(rebooted)
	state(cordoned, IntentReboot, IntentPerform, StateReady, nil)
	cordon(cordoned)
	state(failed, IntentPrepare, IntentPrepare, StateError, map[string]any{f.keys.Key(KeyReason): "Failed to download the update"})
	for _, n := range f.nodes {
		f.startAgent(n)
	}
	stop := f.controller(func(o *ControllerOptions) {
		o.Policy.MaxConcurrent = 2
		o.Policy.AdoptOldCordons = true
	})
	defer stop()
	eventually(t, 3*time.Minute, "every node updated, none cordoned", f.done)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.nodes {
		if f.reboots[n] != 1 {
			t.Errorf("%s rebooted %d times, want once (the old operator's reboot counted)", n, f.reboots[n])
		}
	}
}

// A node the old operator rebooted into its update (reboot-update
// acknowledged busy, no boot ID recorded) while a newer release is listed
// already is back, not rebooted a second time: the host's staged update
// (none) decides, not whether an update is available.
func TestOldRebootWithANewerReleaseListed(t *testing.T) {
	f := newFleetOn(t, testenv.Need(t, env), "oldreboot")
	f.addNode("oldreboot-0", false)
	node := f.nodes[0]
	f.stopAll()
	f.mu.Lock()
	f.closed = false
	f.mu.Unlock()
	ctx := context.Background()
	activateOnHost(t, ctx, f.plats[node]) // the old agent activated it (perform-update ready)
	f.setBootID(node)                     // the old operator's reboot
	f.mu.Lock()
	f.reboots[node]++
	f.mu.Unlock()
	if _, err := releasetest.Write(releasetest.Options{Mirror: f.mirror, Version: "v3", Arch: "amd64", RootfsFiles: 3}); err != nil {
		t.Fatal(err)
	}
	f.patch(node, map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		f.keys.Wanted(): string(IntentReboot), f.keys.Active(): string(IntentReboot), f.keys.State(): string(StateBusy)}}})
	f.startAgent(node) // no controller: the agent alone decides
	eventually(t, time.Minute, "the node reported back from the old operator's reboot", func() (bool, string) {
		v := f.keys.View(f.node(node), "")
		return v.Active == IntentReboot && v.State == StateReady, fmt.Sprintf("active %s state %s", v.Active, v.State)
	})
	time.Sleep(2 * time.Second)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reboots[node] != 1 {
		t.Errorf("rebooted %d times, want once (the old operator's)", f.reboots[node])
	}
}

// A node the old controller cordoned mid-drain (it drains while the node
// is at perform-update/perform-update/ready, before it wants
// reboot-update; its cordon records nothing) ends updated and uncordoned:
// the cordon is adopted as the operator's, not taken for an admin's.
func TestOldCordonMidDrainIsLifted(t *testing.T) {
	f := newFleetOn(t, testenv.Need(t, env), "olddrain")
	f.addNode("olddrain-0", true)
	node := f.nodes[0]
	f.stopAll()
	f.mu.Lock()
	f.closed = false
	f.mu.Unlock()
	ctx := context.Background()
	activateOnHost(t, ctx, f.plats[node]) // the old agent activated it (perform-update ready)
	f.patch(node, map[string]any{"spec": map[string]any{"unschedulable": true}, "metadata": map[string]any{"annotations": map[string]any{
		f.keys.Wanted(): string(IntentPerform), f.keys.Active(): string(IntentPerform), f.keys.State(): string(StateReady)}}})
	f.startAgent(node)
	stop := f.controller(func(o *ControllerOptions) { o.Policy.AdoptOldCordons = true })
	defer stop()
	eventually(t, 2*time.Minute, "updated, uncordoned", f.done)
	if !f.eventSaid(node, ReasonAdopted) {
		t.Errorf("no %s Event", ReasonAdopted)
	}
}

// The old operator's states as it leaves them on Bottlerocket, under its
// own prefix bottlerocket.aws: every node served by the Bottlerocket API
// emulator, the old cordons adopted because of the prefix (not set by
// hand). At rest, mid-prepare, rebooted into the update (reboot-update
// acknowledged busy), cordoned before its reboot, cordoned mid-drain, in
// error: every node ends updated once, none rebooted twice, none left
// cordoned.
func TestMigrationUnderTheBottlerocketPrefix(t *testing.T) {
	f := newFleetOn(t, testenv.Need(t, env), "brmigrate")
	f.usePrefix(BottlerocketPrefix)
	leaveAsTheOldOperator(t, f, "brmigrate")
	f.mu.Lock()
	f.closed = false
	f.mu.Unlock()
	for _, n := range f.nodes {
		f.startAgent(n)
	}
	stop := f.controller(func(o *ControllerOptions) { o.Policy.MaxConcurrent = 2 })
	defer stop()
	eventually(t, 3*time.Minute, "every node updated, none cordoned", f.done)
	for _, n := range f.nodes {
		if r := f.br[n].Reboots(); r != 1 {
			t.Errorf("%s rebooted %d times, want once (the old operator's reboot counted)", n, r)
		}
	}
}

// A node the old operator started preparing (no target-version: it
// records none) takes as its target the version its host reports the
// update brings, so a fallback boot of that update is a failure (retried
// after its backoff), not "updated to" the old version.
func TestOldUpdateAdoptsItsTarget(t *testing.T) {
	f := newFleetOn(t, testenv.Need(t, env), "oldtarget")
	f.mu.Lock()
	f.closed = true // no agent yet: the old operator's state first
	f.mu.Unlock()
	f.addNode("oldtarget-0", true)
	node := f.nodes[0]
	srv := f.br[node]
	srv.FallBack(1)
	if _, err := f.plats[node].Check(context.Background()); err != nil { // the old agent's check: the host chose v2
		t.Fatal(err)
	}
	f.patch(node, map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		f.keys.Wanted(): string(IntentPrepare), f.keys.Active(): string(IntentPrepare), f.keys.State(): string(StateBusy)}}})
	f.mu.Lock()
	f.closed = false
	f.mu.Unlock()
	f.startAgent(node)
	stop := f.controller(nil)
	defer stop()
	eventually(t, 2*time.Minute, "at v2 after the fallback and a second reboot", func() (bool, string) {
		ok, why := f.done()
		return ok && srv.Reboots() == 2, fmt.Sprintf("%s; %d reboots", why, srv.Reboots())
	})
	msgs := f.eventMessages(node)
	var adopted, failed bool
	for _, m := range msgs {
		if strings.HasPrefix(m, ReasonSucceeded) && strings.Contains(m, "v1") {
			t.Errorf("the fallback boot counted as a success: %q", m)
		}
		adopted = adopted || strings.HasPrefix(m, ReasonTargetAdopted) && strings.Contains(m, "v2")
		failed = failed || strings.HasPrefix(m, ReasonFailed) && strings.Contains(m, "fallback")
	}
	if !adopted || !failed {
		t.Errorf("want a %s Event naming v2 and a %s Event naming the fallback boot: %v", ReasonTargetAdopted, ReasonFailed, msgs)
	}
}

// leaveAsTheOldOperator adds six nodes on the Bottlerocket API emulator,
// named <name>-0..5, in the states the old operator leaves (at rest,
// mid-prepare, rebooted into the update, cordoned before its reboot,
// cordoned mid-drain, error), with no agent started (f closed: the caller
// opens it and starts them).
func leaveAsTheOldOperator(t *testing.T, f *fleet, name string) {
	f.mu.Lock()
	f.closed = true // no agent yet: the old operator's states first
	f.mu.Unlock()
	for i := range 6 {
		f.addNode(fmt.Sprintf("%s-%d", name, i), true)
	}
	rest, preparing, rebooted, cordoned, midDrain, failed := f.nodes[0], f.nodes[1], f.nodes[2], f.nodes[3], f.nodes[4], f.nodes[5]
	ctx := context.Background()
	state := func(node string, wanted, active Intent, st State, more map[string]any) {
		ann := map[string]any{f.keys.Wanted(): string(wanted), f.keys.Active(): string(active), f.keys.State(): string(st)}
		for k, v := range more {
			ann[k] = v
		}
		f.patch(node, map[string]any{"metadata": map[string]any{"annotations": ann}})
	}
	cordon := func(node string) { f.patch(node, map[string]any{"spec": map[string]any{"unschedulable": true}}) }
	for _, node := range []string{rebooted, cordoned, midDrain} {
		activateOnHost(t, ctx, f.plats[node]) // the old agent activated it (perform-update ready)
	}
	if err := f.plats[rebooted].Reboot(ctx); err != nil { // the old operator's reboot: the host boots v2
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the old operator's reboot done", func() (bool, string) {
		return f.version(rebooted) == "v2" && !f.isRebooting(rebooted), "rebooting"
	})
	state(rest, IntentStabilize, IntentStabilize, StateReady, map[string]any{f.keys.UpdateAvailable(): "true"})
	state(preparing, IntentPrepare, IntentPrepare, StateBusy, nil)
	state(rebooted, IntentReboot, IntentReboot, StateBusy, nil)
	cordon(rebooted)
	state(cordoned, IntentReboot, IntentPerform, StateReady, nil)
	cordon(cordoned)
	state(midDrain, IntentPerform, IntentPerform, StateReady, nil)
	cordon(midDrain)
	state(failed, IntentPrepare, IntentPrepare, StateError, nil)
}

// activateOnHost takes a host through check, prepare and perform, as the
// old agent did before its operator wanted reboot-update.
func activateOnHost(t *testing.T, ctx context.Context, p platform.Platform) {
	t.Helper()
	if _, err := p.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Perform(ctx); err != nil {
		t.Fatal(err)
	}
}

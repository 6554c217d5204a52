package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/ops/testenv/hostcheck"
	"slipway.dev/slipway/ops/testenv/monitor"
)

// The named schedules of the agent's guards around a slot that ends
// before its reboot: a maintenance window that closes after a node's swap
// and drain makes the node give its slot back (a deferral, not a
// failure), and that node must not keep the new release staged for its
// next unplanned reboot (ownRebootsBootWhatRan, staged-without-slot).

func init() { maps.Copy(Schedules, guardSchedules) }

// guardNamed are the guard schedules run by TestGuardSchedules.
var guardNamed = []string{"k3os-window-deferral-then-reboot"}

// variantWindowDeferral is the k3os variant of the window deferral.
const variantWindowDeferral = "window-deferral"

// InvOwnRebootBootsWhatRan: a node's own reboot while it holds no slot
// boots the release it ran (ownRebootsBootWhatRan, on the hosts' files).
const InvOwnRebootBootsWhatRan = "own-reboot-boots-what-ran"

// k3osWrappers wrap the k3os system for a variant that needs more than
// startVariant's cases (runK3os).
var k3osWrappers = map[string]func(*k3os) system{
	variantWindowDeferral: func(s *k3os) system { return &k3osWindowDeferral{k3os: s} },
}

var guardSchedules = map[string]Named{
	// Evictions are blocked for the rollout's first 12 s (the drain
	// timeout is 20 s), so the first slot's node stays cordoned in its
	// drain with its swap staged. The variant then closes the maintenance
	// window (prestage off, so no staging permit rewrites the node's view
	// after it gives its slot back): once the drain ends the node may not
	// reboot and defers, giving its slot back uncordoned. Its slot stays
	// in its view (the controller does not rewrite a view for what the
	// node itself ended), so an agent that asked "does my view show a
	// slot" rather than "is it live" (plan.SlotLive) kept v2 staged. The
	// variant then reboots that node by itself (no slot, no window, no
	// drain): it must boot the release it ran (ownRebootsBootWhatRan).
	// Last, the window is lifted and the rollout ends at v2. The release
	// source answers 1 ms late for 120 s: a fault that changes nothing
	// here but keeps the injector running until the variant's reboot has
	// struck, so that the run's strikes (Result.Strikes, taken when the
	// schedule ends) hold it and the monitor excuses that reboot alone.
	"k3os-window-deferral-then-reboot": {System: "k3os", Nodes: 5, Variant: variantWindowDeferral,
		Doc: "a slot deferred by a window that closed after its swap and drain, then its node reboots by itself: it boots the release it ran, nothing stays staged without a slot",
		Schedule: faults.Schedule{
			{At: 0, Kind: faults.BlockEviction, Target: "pdb/default/guarded", For: 12 * time.Second},
			{At: 0, Kind: faults.SlowSource, Target: k3osSource, For: 120 * time.Second, Arg: time.Millisecond},
		}},
}

// k3osWindowDeferral is the k3os system run with variantWindowDeferral.
type k3osWindowDeferral struct {
	*k3os
	mu sync.Mutex
	// notes are what the variant did, in order, for the outcome.
	notes []string
	// deferred is the node whose slot the closed window deferred.
	deferred string
	// root and nodes are the run's nodes' directories and names.
	root  string
	nodes []string
}

func (s *k3osWindowDeferral) note(h *harness, format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	h.logf("variant: %s", line)
	s.mu.Lock()
	s.notes = append(s.notes, line)
	s.mu.Unlock()
}

// startVariant turns prestage off and runs closeWindow beside the run.
func (s *k3osWindowDeferral) startVariant(ctx context.Context, h *harness) (stop func(), err error) {
	s.root, s.nodes = nodesRoot(h.dir), h.nodes
	if err := s.patchChannel(ctx, `{"spec":{"prestage":{"concurrency":0}}}`); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.closeWindow(ctx, h); err != nil && ctx.Err() == nil {
			s.note(h, "failed: %v", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

func (s *k3osWindowDeferral) patchChannel(ctx context.Context, patch string) error {
	if _, err := s.oc.OpsV1().UpdateChannels(k3osNS).Patch(ctx, "default", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch the channel %s: %w", patch, err)
	}
	return nil
}

// closeWindow waits for a slot in its drain with its swap staged, closes
// the window, waits for that slot to be given back, then reboots its node
// by itself and lifts the window.
func (s *k3osWindowDeferral) closeWindow(ctx context.Context, h *harness) error {
	node, err := s.poll(ctx, 2*time.Minute, "a slot draining with its swap staged", func() (string, error) {
		ch, err := s.oc.OpsV1().UpdateChannels(k3osNS).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return "", nil
		}
		for _, sl := range ch.Status.Updating {
			if sl.Phase != plan.PhaseDraining {
				continue
			}
			if host, err := hostcheck.ReadHost(sl.Node, h.env.NodeDir(sl.Node)); err == nil && host.Next.Rootfs == "v2" {
				return sl.Node, nil
			}
		}
		return "", nil
	})
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	closed := fmt.Sprintf(`{"spec":{"window":{"start":%q,"end":%q,"timeZone":"UTC"}}}`,
		now.Add(2*time.Hour).Format("15:04"), now.Add(3*time.Hour).Format("15:04"))
	if err := s.patchChannel(ctx, closed); err != nil {
		return err
	}
	s.note(h, "window closed while %s drains with v2 staged", node)
	if _, err := s.poll(ctx, 2*time.Minute, node+"'s slot given back", func() (string, error) {
		holders, err := s.slotHolders(ctx)
		if err != nil || slices.Contains(holders, node) {
			return "", nil
		}
		return node, nil
	}); err != nil {
		return err
	}
	s.mu.Lock()
	s.deferred = node
	s.mu.Unlock()
	// With the fix the rollback Job unstages v2 within seconds; without
	// it nothing does: wait for the host to boot what it runs, or 30 s.
	_, err = s.poll(ctx, 30*time.Second, "", func() (string, error) {
		host, err := hostcheck.ReadHost(node, h.env.NodeDir(node))
		if b, ok := host.Booted(); err == nil && ok && b.Rootfs == host.Next.Rootfs {
			return node, nil
		}
		return "", nil
	})
	host, _ := hostcheck.ReadHost(node, h.env.NodeDir(node))
	s.note(h, "%s gave its slot back; next boot %s (unstaged: %t)", node, host.Next, err == nil)
	if s.sim == nil {
		return fmt.Errorf("no injector to reboot %s", node)
	}
	heal, err := s.sim.Inject(ctx, faults.Fault{Kind: faults.Reboot, Target: "node/" + node, For: 2 * time.Second})
	if err != nil {
		return fmt.Errorf("reboot %s by itself: %w", node, err)
	}
	if heal != nil {
		if err := heal(ctx); err != nil {
			return fmt.Errorf("reboot %s by itself: %w", node, err)
		}
	}
	s.note(h, "%s rebooted by itself with no slot", node)
	if err := s.patchChannel(ctx, `{"spec":{"window":null}}`); err != nil {
		return err
	}
	s.note(h, "window lifted")
	return nil
}

// poll calls cond every 200 ms until it names a node, or timeout.
func (s *k3osWindowDeferral) poll(ctx context.Context, timeout time.Duration, what string, cond func() (string, error)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if n, err := cond(); err != nil || n != "" {
			return n, err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s: not within %s", what, timeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// settled adds what the variant did; the run settles only once the
// window was lifted.
func (s *k3osWindowDeferral) settled(ctx context.Context, h *harness) (bool, string) {
	ok, out := s.k3os.settled(ctx, h)
	s.mu.Lock()
	notes := strings.Join(s.notes, "; ")
	lifted := slices.Contains(s.notes, "window lifted")
	s.mu.Unlock()
	return ok && lifted, out + "; variant: [" + notes + "]"
}

// hostViolations adds to the host checks' findings each reboot of a node's
// own, with no slot, that booted another release than the node ran: the
// run's verdict holds the case (scripts/chaos, make chaos), not only
// TestGuardSchedules. staged-without-slot alone does not: its grace
// (hostcheck.DefaultGrace) outlasts the variant's wait before the reboot.
func (s *k3osWindowDeferral) hostViolations(settled bool) ([]monitor.Violation, error) {
	out, err := s.k3os.hostViolations(settled)
	if s.root == "" {
		return out, err
	}
	bad, berr := ownRebootsBootWhatRan(s.root, s.nodes)
	for _, b := range bad {
		node, _, _ := strings.Cut(b, ":")
		out = append(out, monitor.Violation{At: time.Now(), Invariant: InvOwnRebootBootsWhatRan, Key: "node/" + node, Message: b})
	}
	if err == nil {
		err = berr
	}
	return out, err
}

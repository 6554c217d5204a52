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

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv/faults"
)

// The named schedule of the agent's reboot guard against a stale view
// (k3os-stale-view-reboot). The agent confirms its slot, right before it
// reboots, from its view (its NodeUpdate), which the controller writes
// after the status write that took the slot away. A slot is taken away
// from a node that is NotReady, silent or past its timeouts; here a node
// freezes in its reboot delay (a frozen VM: its agent SIGSTOPped, the
// node NotReady) past the channel's nodeReadyTimeout, its slot fails and
// is taken away, and the API server holds the controller's view writes
// (SlowWrites: staleHold each) so that the node's view still gives it the
// slot. The node comes back, and its agent is resumed once the channel
// grants a slot to another node. Without the fence (a slot taken away
// leaves its node's view before its capacity is granted again) the grant
// comes while the view still gives the frozen node its slot, and its
// guard lets it reboot with no slot (reboot-without-slot, and beside the
// new slot's node). With it the grant waits for that view write, and the
// guard, asked after it, refuses.

func init() {
	maps.Copy(Schedules, staleSchedules)
	k3osWrappers[variantStaleView] = func(s *k3os) system { return &k3osStaleView{k3os: s} }
}

// variantStaleView is the k3os variant of the stale view.
const variantStaleView = "stale-view"

// staleNamed are the schedules TestStaleSchedules runs.
var staleNamed = []string{"k3os-stale-view-reboot"}

// staleHold is how long the API server holds the controller's view
// writes once the node's slot was taken away: far longer than the node
// takes to come back and, without the fence, the next slot to be granted.
// Each write is held up to staleHold; the controller's client gives up on
// one after a few seconds and writes it again, so its view writes land
// once the hold ends.
const staleHold = 20 * time.Second

// staleReadyTimeout is the channel's nodeReadyTimeout in the variant: a
// frozen node's slot is taken away after it (the default is 10 minutes).
const staleReadyTimeout = 30 * time.Second

// staleRebootDelay is the channel's rebootDelay in the variant: the time
// the variant has to freeze the node between its slot's Rebooting and its
// reboot.
const staleRebootDelay = 3 * time.Second

var staleSchedules = map[string]Named{
	// The variant does the case (freeze, hold, thaw); the release source
	// answering 1 ms late for 150 s keeps the schedule open meanwhile, so
	// that the run's settling budget counts from after it.
	"k3os-stale-view-reboot": {System: "k3os", Nodes: 5, Variant: variantStaleView,
		Doc: "a node frozen in its reboot delay loses its slot while the controller's view writes are held: its guard must not reboot on the stale view once the slot went to another node (reboot-without-slot)",
		Schedule: faults.Schedule{
			{At: 0, Kind: faults.SlowSource, Target: k3osSource, For: 150 * time.Second, Arg: time.Millisecond},
		}},
}

// k3osStaleView is the k3os system run with variantStaleView.
type k3osStaleView struct {
	*k3os
	mu    sync.Mutex
	notes []string
	done  bool
}

func (s *k3osStaleView) note(h *harness, format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	h.logf("variant: %s", line)
	s.mu.Lock()
	s.notes = append(s.notes, line)
	s.mu.Unlock()
}

// startVariant sets the channel's reboot delay and node-ready timeout and
// runs the case beside the run.
func (s *k3osStaleView) startVariant(ctx context.Context, h *harness) (stop func(), err error) {
	patch := fmt.Sprintf(`{"spec":{"rebootDelay":%q,"nodeReadyTimeout":%q}}`, staleRebootDelay, staleReadyTimeout)
	if _, err := s.oc.OpsV1().UpdateChannels(k3osNS).Patch(ctx, "default", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("patch the channel %s: %w", patch, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	heals := &healList{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.freezeAndThaw(ctx, h, heals); err != nil && ctx.Err() == nil {
			s.note(h, "failed: %v", err)
		}
		heals.run(h)
		s.mu.Lock()
		s.done = true
		s.mu.Unlock()
	}()
	return func() { cancel(); <-done }, nil
}

// healList are the heals of the faults the variant injected, run once.
type healList struct {
	mu    sync.Mutex
	heals []func() error
}

// add keeps heal and returns it made to run once.
func (l *healList) add(heal func(context.Context) error) func(context.Context) error {
	if heal == nil {
		return func(context.Context) error { return nil }
	}
	once := sync.OnceValue(func() error { return heal(context.Background()) })
	l.mu.Lock()
	l.heals = append(l.heals, once)
	l.mu.Unlock()
	return func(context.Context) error { return once() }
}

func (l *healList) run(h *harness) {
	l.mu.Lock()
	heals := l.heals
	l.mu.Unlock()
	for _, heal := range slices.Backward(heals) {
		if err := heal(); err != nil {
			h.logf("variant: heal: %v", err)
		}
	}
}

// freezeAndThaw freezes the first node whose slot is Rebooting, holds the
// controller's view writes, waits for the slot to be taken away, thaws
// the node once another node holds a slot, and watches what it does.
func (s *k3osStaleView) freezeAndThaw(ctx context.Context, h *harness, heals *healList) error {
	inj := s.injector()
	for inj == nil { // set as the faults start, right after this variant
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		inj = s.injector()
	}
	var slot v1.Slot
	if err := s.pollChannel(ctx, 3*time.Minute, "a slot Rebooting", func(ch *v1.UpdateChannel) bool {
		for _, sl := range ch.Status.Updating {
			if sl.Phase == plan.PhaseRebooting {
				slot = sl
				return true
			}
		}
		return false
	}); err != nil {
		return err
	}
	node := slot.Node
	boots := h.env.Supervisor.Boots(node)
	pause, err := inj.Inject(ctx, faults.Fault{Kind: faults.Pause, Target: "agent/" + node, For: time.Hour})
	if err != nil {
		return fmt.Errorf("pause %s's agent: %w", node, err)
	}
	pause = heals.add(pause)
	// Its view shows the slot Rebooting before the writes are held, as
	// the agent would have read it before it froze.
	if err := s.pollView(ctx, time.Minute, node, func(sl *v1.Slot) bool { return sl != nil && sl.Phase == plan.PhaseRebooting }); err != nil {
		return err
	}
	hold, err := inj.Inject(ctx, faults.Fault{Kind: faults.SlowWrites, Target: k3osViewWrites, For: time.Hour, Arg: staleHold})
	if err != nil {
		return fmt.Errorf("hold the view writes: %w", err)
	}
	hold = heals.add(hold)
	down, err := inj.Inject(ctx, faults.Fault{Kind: faults.NotReady, Target: "node/" + node, For: time.Hour})
	if err != nil {
		return fmt.Errorf("take %s NotReady: %w", node, err)
	}
	down = heals.add(down)
	if h.env.Supervisor.Boots(node) != boots {
		s.note(h, "missed: %s rebooted before it froze", node)
		return nil
	}
	s.note(h, "%s frozen in its reboot delay (agent paused, NotReady); the controller's view writes held", node)
	var why string
	if err := s.pollChannel(ctx, 3*time.Minute, node+"'s slot taken away", func(ch *v1.UpdateChannel) bool {
		if plan.FindSlot(ch.Status, node) >= 0 {
			return false
		}
		for _, f := range ch.Status.Failed {
			if f.Node == node {
				why = f.Reason
			}
		}
		return true
	}); err != nil {
		return err
	}
	taken := time.Now()
	lift := time.AfterFunc(staleHold, func() { _ = hold(ctx) })
	defer lift.Stop()
	shown, _ := s.viewGives(ctx, node, slot)
	s.note(h, "%s's slot taken away (%s); its view still gives it the slot: %t; the view writes held %s more", node, why, shown, staleHold)
	if err := down(ctx); err != nil {
		return fmt.Errorf("take %s Ready again: %w", node, err)
	}
	var next string
	if err := s.pollChannel(ctx, 3*time.Minute, "a slot granted to another node", func(ch *v1.UpdateChannel) bool {
		for _, sl := range ch.Status.Updating {
			if sl.Node != node {
				next = sl.Node
				return true
			}
		}
		return false
	}); err != nil {
		return err
	}
	shown, err = s.viewGives(ctx, node, slot)
	if err != nil {
		return err
	}
	s.note(h, "%s granted a slot %s after %s's was taken away; %s's view still gives it the slot: %t",
		next, time.Since(taken).Round(100*time.Millisecond), node, node, shown)
	if err := pause(ctx); err != nil {
		return fmt.Errorf("resume %s's agent: %w", node, err)
	}
	s.note(h, "%s thawed (its agent resumed)", node)
	// Until it reboots, holds a slot again (a new grant, which its
	// reboot may follow), or 20 s have passed.
	rebooted, again := false, false
	deadline := time.Now().Add(20 * time.Second)
	for !rebooted && !again && time.Now().Before(deadline) && ctx.Err() == nil {
		ch, err := s.oc.OpsV1().UpdateChannels(k3osNS).Get(ctx, "default", metav1.GetOptions{})
		again = err == nil && plan.FindSlot(ch.Status, node) >= 0
		rebooted = !again && h.env.Supervisor.Boots(node) != boots
		time.Sleep(100 * time.Millisecond)
	}
	var mine []string
	for _, w := range s.writes.Held() {
		if w.Name == protocol.NodeUpdateName(node) {
			mine = append(mine, w.String())
		}
	}
	if err := hold(ctx); err != nil {
		return err
	}
	s.note(h, "%s rebooted with no slot after its thaw: %t (a slot again: %t); view writes no longer held; %s's held: [%s]", node, rebooted, again, node, strings.Join(mine, "; "))
	return nil
}

// pollChannel reads the channel every 50 ms until cond, or timeout.
func (s *k3osStaleView) pollChannel(ctx context.Context, timeout time.Duration, what string, cond func(*v1.UpdateChannel) bool) error {
	end := time.Now().Add(timeout)
	for {
		ch, err := s.oc.OpsV1().UpdateChannels(k3osNS).Get(ctx, "default", metav1.GetOptions{})
		if err == nil && cond(ch) {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("%s: not within %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// viewSlot is node's slot as its NodeUpdate's views show it (nil: none).
func (s *k3osStaleView) viewSlot(ctx context.Context, node string) (*v1.Slot, error) {
	u, err := s.oc.OpsV1().NodeUpdates(k3osNS).Get(ctx, protocol.NodeUpdateName(node), metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read %s's NodeUpdate: %w", node, err)
	}
	for _, c := range u.Spec.Channels {
		if c.Slot != nil {
			return c.Slot, nil
		}
	}
	return nil, nil
}

// viewGives tells whether node's view still shows slot (the same grant).
func (s *k3osStaleView) viewGives(ctx context.Context, node string, slot v1.Slot) (bool, error) {
	sl, err := s.viewSlot(ctx, node)
	return err == nil && sl != nil && plan.SameSlot(*sl, slot), err
}

// pollView reads node's view every 50 ms until cond holds of its slot.
func (s *k3osStaleView) pollView(ctx context.Context, timeout time.Duration, node string, cond func(*v1.Slot) bool) error {
	end := time.Now().Add(timeout)
	for {
		sl, err := s.viewSlot(ctx, node)
		if err == nil && cond(sl) {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("%s's view: not within %s (last %+v, %v)", node, timeout, sl, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// settled adds what the variant did; the run settles only once it is done.
func (s *k3osStaleView) settled(ctx context.Context, h *harness) (bool, string) {
	ok, out := s.k3os.settled(ctx, h)
	s.mu.Lock()
	defer s.mu.Unlock()
	return ok && s.done, out + "; variant: [" + strings.Join(s.notes, "; ") + "]"
}

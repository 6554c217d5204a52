package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrSkip, returned by an Injector, says the fault could not hit its target
// now (a node rebooting, a process not running): Run counts it as skipped.
var ErrSkip = errors.New("target not there now")

// Injector applies one fault; heal, when not nil, ends a timed fault.
type Injector interface {
	Inject(ctx context.Context, f Fault) (heal func(context.Context) error, err error)
}

// InjectorFunc adapts a function to an Injector.
type InjectorFunc func(ctx context.Context, f Fault) (func(context.Context) error, error)

// Inject calls fn.
func (fn InjectorFunc) Inject(ctx context.Context, f Fault) (func(context.Context) error, error) {
	return fn(ctx, f)
}

// Armed reports whether a fault of kind k may be a trap that strikes only
// when the system reaches it (a PowerCut at its step, a Reboot with a
// step), not at its offset.
func (k Kind) Armed() bool { return k == PowerCut || k == Reboot }

// Armed reports whether f is a trap (Kind.Armed): a Reboot is one only
// with a Step.
func (f Fault) Armed() bool { return f.Kind.Armed() && (f.Kind != Reboot || f.Step != "") }

// Striker is an Injector that counts the armed faults that struck, by kind
// (Sim.Fired): Run counts an armed fault as injected only when it struck.
type Striker interface {
	Fired() map[Kind]int
}

// Report is what Run did.
type Report struct {
	// Injected and Skipped count the faults by kind. An armed fault (a
	// PowerCut) is injected only when it struck during the run (as its
	// Injector, a Striker, counts); one that nothing reached is Armed only.
	Injected map[Kind]int
	Skipped  map[Kind]int
	// Armed counts the armed faults set, struck or not.
	Armed map[Kind]int
	// FaultTime is the sum of the timed faults' lengths as applied (a fault
	// healed early at the end of the run counts until then).
	FaultTime time.Duration
	// Errors are the faults that failed to apply or heal.
	Errors []error
	// Strikes are the faults that took a node down and up (a PowerCut that
	// struck, a Reboot), when the Injector records them (Sim.Strikes):
	// when each struck, which an armed one's offset does not say.
	Strikes []Strike
}

// strikeRecorder is an Injector that records the reboots it caused.
type strikeRecorder interface {
	Strikes() []Strike
}

// Run applies sched through inj, each fault at its offset from the call,
// and heals each timed fault after its For. When ctx ends (or the last
// fault is applied and healed), every fault still standing is healed and
// Run returns. log, when set, receives one line per fault applied, skipped
// or healed.
func Run(ctx context.Context, sched Schedule, inj Injector, log func(string)) Report {
	if log == nil {
		log = func(string) {}
	}
	start := time.Now()
	rep := Report{Injected: map[Kind]int{}, Skipped: map[Kind]int{}, Armed: map[Kind]int{}}
	striker, _ := inj.(Striker)
	var firedBefore map[Kind]int
	if striker != nil {
		firedBefore = striker.Fired()
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	healCtx := context.WithoutCancel(ctx)
	for _, f := range sched {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(start.Add(f.At))):
		}
		if ctx.Err() != nil {
			break
		}
		heal, err := inj.Inject(ctx, f)
		mu.Lock()
		switch {
		case errors.Is(err, ErrSkip):
			rep.Skipped[f.Kind]++
			log(fmt.Sprintf("%s: skipped: %v", f, err))
		case err != nil:
			rep.Errors = append(rep.Errors, fmt.Errorf("%s: %w", f, err))
			log(fmt.Sprintf("%s: failed: %v", f, err))
		case f.Armed():
			rep.Armed[f.Kind]++
			log(fmt.Sprintf("%s: armed at +%s", f, time.Since(start).Round(time.Millisecond)))
		default:
			rep.Injected[f.Kind]++
			log(fmt.Sprintf("%s: injected at +%s", f, time.Since(start).Round(time.Millisecond)))
		}
		mu.Unlock()
		if err != nil || heal == nil {
			continue
		}
		applied := time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
			case <-time.After(f.For):
			}
			herr := heal(healCtx)
			mu.Lock()
			defer mu.Unlock()
			rep.FaultTime += time.Since(applied)
			if herr != nil {
				rep.Errors = append(rep.Errors, fmt.Errorf("heal %s: %w", f, herr))
				log(fmt.Sprintf("%s: heal failed: %v", f, herr))
				return
			}
			log(fmt.Sprintf("%s: healed at +%s", f, time.Since(start).Round(time.Millisecond)))
		}()
	}
	wg.Wait()
	if sr, ok := inj.(strikeRecorder); ok {
		for _, st := range sr.Strikes() {
			if !st.At.Before(start) {
				rep.Strikes = append(rep.Strikes, st)
			}
		}
	}
	if striker != nil { // an armed fault is healed (disarmed) by now: what struck is final
		for k, n := range striker.Fired() {
			if k.Armed() && n > firedBefore[k] {
				rep.Injected[k] += n - firedBefore[k]
			}
		}
	}
	return rep
}

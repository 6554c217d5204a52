package upgrade

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/lock"
	"slipway.dev/slipway/upgrade/reboot"
)

// RollbackOptions of one rollback.
type RollbackOptions struct {
	SystemDir   string
	Components  []layout.Component // default: what the last upgrade swapped (LastSwapped)
	Remount     bool
	Sync        bool
	Reboot      bool
	RebootDelay time.Duration
	Rebooter    reboot.Rebooter
	LockFile    string
	Command     string
	DryRun      bool
	// From, when set, makes the rollback idempotent: a component rolls
	// back only while its current is From[c]; one already rolled back
	// (current elsewhere, previous From[c]) is left as it is, and any
	// other state fails the rollback before a link changes. A Job's pod
	// may be started twice; the second start then changes nothing.
	From map[layout.Component]string
	// Hook is called after each link the rollback sets, with the step
	// "rollback:<link>:<component>" (e.g. rollback:current:kernel); tests
	// use it to cut the rollback between two links.
	Hook func(step string)
}

// Rollback swaps current and previous of each chosen component, under the
// upgrade lock. A component without a previous version (or whose previous
// folder is gone) fails the whole rollback before any link changes. With
// no component chosen, it rolls back what the last upgrade swapped.
func Rollback(ctx context.Context, o RollbackOptions) (*Result, error) {
	if o.SystemDir == "" {
		o.SystemDir = DefaultSystemDir
	}
	if len(o.Components) == 0 {
		o.Components = LastSwapped(layout.New(o.SystemDir))
	}
	if o.LockFile == "" {
		o.LockFile = lock.DefaultPath
	}
	if o.Command == "" {
		o.Command = "slipway ops rollback"
	}
	if !o.DryRun {
		l, err := lock.Acquire(o.LockFile, o.Command)
		if err != nil {
			return nil, err
		}
		defer l.Release()
	}
	res, err := rollback(o)
	if err != nil || !o.Reboot || o.DryRun {
		return res, err
	}
	if o.Rebooter == nil {
		o.Rebooter = reboot.Auto()
	}
	res.Rebooting = true
	return res, reboot.After(ctx, o.RebootDelay, o.Rebooter)
}

func rollback(o RollbackOptions) (*Result, error) {
	l := layout.New(o.SystemDir)
	if !o.DryRun {
		pending, err := l.PendingSwap()
		if err != nil {
			return nil, err
		}
		asked := o.Components
		var added []layout.Component
		o.Components, o.From, added = wholeSwap(o.Components, o.From, pending)
		if len(added) > 0 {
			slog.Warn("a swap was cut short between its links: it is finished and rolled back whole, with the components it moved beside those asked for",
				"added", added, "asked", asked)
		}
		if err := finishSwap(o.SystemDir, o.Remount); err != nil {
			return nil, err
		}
	}
	res := &Result{SystemDir: o.SystemDir, DryRun: o.DryRun}
	for _, c := range o.Components {
		cr, err := rollbackStep(l, c, o.From[c])
		if err != nil {
			return nil, err
		}
		res.Components = append(res.Components, cr)
	}
	if o.DryRun || !anyRollback(res.Components) {
		return res, nil
	}
	restore, err := writable(o.SystemDir, o.Remount)
	if err != nil {
		return nil, err
	}
	err = l.SetLinks(rollbackLinks(res.Components), func(ch layout.LinkChange) {
		if o.Hook != nil {
			o.Hook("rollback:" + ch.Link + ":" + string(ch.Component))
		}
	})
	for _, cr := range res.Components {
		switch {
		case cr.Action != ActionRollback:
			slog.Info("already rolled back", "component", cr.Component, "current", cr.From)
		case err == nil:
			slog.Info("rolled back", "component", cr.Component, "from", cr.From, "to", cr.To)
		}
	}
	if rerr := restore(); err == nil {
		err = rerr
	}
	if err == nil && o.Sync {
		syncAll()
	}
	return res, err
}

// wholeSwap is the rollback's components (and `--from` versions) when a
// swap cut short is pending (its journal's links, nil: none): finishing it
// moves every component whose current link it names, so each of those is
// rolled back too, from the version the journal sets (when from is used),
// and added names those that were not asked for. Rolling back only some
// would leave the others on the release the cut swap was going to, a pair
// of rootfs and kernel no release has.
func wholeSwap(components []layout.Component, from map[layout.Component]string, pending []layout.LinkChange) ([]layout.Component, map[layout.Component]string, []layout.Component) {
	var added []layout.Component
	for _, ch := range pending {
		if ch.Link != layout.CurrentLink || slices.Contains(components, ch.Component) {
			continue
		}
		components = append(slices.Clone(components), ch.Component)
		if from != nil {
			from = maps.Clone(from)
			from[ch.Component] = ch.Version
		}
		added = append(added, ch.Component)
	}
	return components, from, added
}

// rollbackStep is what rolling c back does: exchange current and previous
// (ActionRollback), or nothing when from is set and the rollback from it
// is already done (ActionCurrent: current elsewhere, previous from).
func rollbackStep(l layout.Layout, c layout.Component, from string) (ComponentResult, error) {
	if from != "" {
		cur, _ := l.Current(c)
		prev, _ := l.Previous(c)
		if cur != from {
			if prev == from && cur != "" {
				return ComponentResult{Component: c, From: cur, To: cur, Action: ActionCurrent}, nil
			}
			return ComponentResult{}, fmt.Errorf("%w: %s current is %s, previous %s, not the expected current %s: the links changed since the rollback was asked for; check `slipway ops status`", ErrNoRollback, c, orNone(cur), orNone(prev), from)
		}
	}
	cur, prev, err := rollbackPair(l, c)
	if err != nil {
		return ComponentResult{}, err
	}
	return ComponentResult{Component: c, From: cur, To: prev, Action: ActionRollback}, nil
}

func anyRollback(crs []ComponentResult) bool {
	for _, cr := range crs {
		if cr.Action == ActionRollback {
			return true
		}
	}
	return false
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// rollbackPair returns current and previous of c, checking previous exists.
func rollbackPair(l layout.Layout, c layout.Component) (cur, prev string, err error) {
	if cur, err = l.Current(c); err != nil {
		return "", "", err
	}
	if prev, err = l.Previous(c); err != nil {
		return "", "", err
	}
	if prev == "" || prev == cur {
		return "", "", fmt.Errorf("%w: %s has no previous version (current %q)", ErrNoRollback, c, cur)
	}
	if fi, err := os.Stat(l.VersionDir(c, prev)); err != nil || !fi.IsDir() {
		return "", "", fmt.Errorf("%w: %s/previous points at %s, which is missing; reinstall it with `slipway ops upgrade --version`", ErrNoRollback, c, prev)
	}
	return cur, prev, nil
}

// rollbackLinks are the links a rollback sets, as one swap: for each
// component rolled back, previous at its current and current at its
// previous (a crash between two is finished at the next boot or run).
func rollbackLinks(crs []ComponentResult) []layout.LinkChange {
	var out []layout.LinkChange
	for _, cr := range crs {
		if cr.Action != ActionRollback {
			continue
		}
		if cr.From != "" {
			out = append(out, layout.LinkChange{Component: cr.Component, Link: layout.PreviousLink, Version: cr.From})
		}
		out = append(out, layout.LinkChange{Component: cr.Component, Link: layout.CurrentLink, Version: cr.To})
	}
	return out
}

// LastSwapped is what `ops rollback` undoes when no component is chosen:
// the rootfs, and each other component whose `current` came from the same
// release as the rootfs's (their markers say so) and has a `previous`. A
// release that kept the kernel leaves the kernel's links as they were, so
// the kernel is not rolled back with it (rolling it back would boot an
// older kernel than the one the rootfs ran with, or fail for want of a
// previous); a k3s swapped with the rootfs is. Without a marker on the
// rootfs (a folder k3os installed), it is DefaultComponents.
func LastSwapped(l layout.Layout) []layout.Component {
	release := func(c layout.Component) string {
		cur, err := l.Current(c)
		if err != nil || cur == "" {
			return ""
		}
		if m := readMarker(l.VersionDir(c, cur)); m != nil {
			return m.Release
		}
		return ""
	}
	rootfs := release(layout.Rootfs)
	if rootfs == "" {
		return DefaultComponents
	}
	out := []layout.Component{layout.Rootfs}
	for _, c := range []layout.Component{layout.Kernel, layout.K3s} {
		if prev, _ := l.Previous(c); prev != "" && release(c) == rootfs {
			out = append(out, c)
		}
	}
	return out
}

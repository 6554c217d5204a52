package upgrade

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"slipway.dev/slipway/upgrade/lock"
)

// ErrNotStaged is wrapped by Activate's error when a component of the
// version was never staged (or its staged copy is incomplete).
var ErrNotStaged = errors.New("not staged")

// Stage is the first half of Run: it resolves the version, downloads and
// verifies its artifacts and renames them into their version folders in the
// system directory, with markers, but moves no link: `current` still boots
// the running version. Staging a version already staged (or current)
// changes nothing. Options.Reboot is ignored.
func Stage(ctx context.Context, o Options) (*Result, error) {
	return phase(ctx, o, func(p *plan) error { return p.stageAll(ctx) })
}

// Activate is the second half of Run: it moves `previous` and `current` of
// every component to the version Stage installed, each link atomically. It
// downloads nothing: a component that still needs staging fails it with
// ErrNotStaged and changes nothing. Options.Reboot is ignored.
func Activate(ctx context.Context, o Options) (*Result, error) {
	return phase(ctx, o, func(p *plan) error {
		for _, cp := range p.comps {
			if cp.action == ActionStage {
				return fmt.Errorf("%w: %s %s is not staged in %s; stage it first", ErrNotStaged, cp.c, cp.to, o.SystemDir)
			}
		}
		return p.relinkAll()
	})
}

// phase runs one half of an upgrade under the lock, on a writable system
// directory.
func phase(ctx context.Context, o Options, do func(*plan) error) (*Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	o.Reboot = false
	if !o.DryRun {
		l, err := lock.Acquire(o.LockFile, o.Command)
		if err != nil {
			return nil, err
		}
		defer l.Release()
	}
	p, err := newPlan(ctx, &o)
	if err != nil {
		return nil, err
	}
	if res := p.result(); res.AlreadyCurrent || o.DryRun {
		slog.Debug("nothing to do", "version", p.version, "dryRun", o.DryRun)
		return res, nil
	}
	restore, err := writable(o.SystemDir, o.Remount)
	if err != nil {
		return nil, err
	}
	err = do(p)
	if rerr := restore(); err == nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	if o.Sync {
		syncAll()
	}
	return p.result(), nil
}

// Package upgrade swaps a node's OS (rootfs, kernel, k3s) in a
// k3os-compatible system directory: it resolves a version from a release
// channel, verifies every artifact against sha256sum-<arch>.txt while staging
// it on the system directory's filesystem, then renames it into place and
// moves the `previous` and `current` links, so that a crash at any instant
// leaves a bootable `current`. Rollback swaps current and previous back;
// Status reports them.
package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"slipway.dev/slipway/upgrade/channel"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/lock"
	"slipway.dev/slipway/upgrade/reboot"
	"slipway.dev/slipway/upgrade/release"
	"slipway.dev/slipway/upgrade/remount"
)

// DefaultSystemDir is where k3os keeps its system directory.
const DefaultSystemDir = "/k3os/system"

// DefaultComponents are upgraded when none is chosen.
var DefaultComponents = []layout.Component{layout.Rootfs, layout.Kernel}

// Progress wraps a download to report its progress (upgrade/progress).
type Progress interface {
	Wrap(rc io.ReadCloser, name string, total int64) io.ReadCloser
}

// Options of one upgrade.
type Options struct {
	SystemDir   string             // default DefaultSystemDir
	Source      channel.Source     // where releases come from (required)
	Version     string             // a version, or "" / "latest"
	Components  []layout.Component // default DefaultComponents
	Arch        string             // default this machine's
	Remount     bool               // remount the system dir read-write for the swap, read-only after
	Sync        bool               // sync(2) after the swap
	Reboot      bool               // reboot after RebootDelay
	RebootDelay time.Duration
	Rebooter    reboot.Rebooter // default reboot.Auto()
	LockFile    string          // default lock.DefaultPath
	Command     string          // recorded in the lock file for a concurrent run's error
	DryRun      bool            // plan only: no lock, no change
	Progress    Progress        // nil: no progress output
	// Hook is called after each step of the swap (see Steps); tests use it
	// to crash the process at every step.
	Hook func(step string)
	// Fail, when set, is asked after each step of staging ("extracting" is
	// not one: "staged"); an error it returns fails the staging there as
	// a write of that step would (tests inject a full disk this way).
	Fail func(step string) error
}

// ComponentResult tells what happened to one component.
type ComponentResult struct {
	Component layout.Component `json:"component"`
	From      string           `json:"from,omitempty"`
	To        string           `json:"to"`
	Action    Action           `json:"action"`
}

// Result of Run.
type Result struct {
	SystemDir      string            `json:"systemDir"`
	Source         string            `json:"source,omitempty"`
	Version        string            `json:"version,omitempty"`
	AlreadyCurrent bool              `json:"alreadyCurrent"`
	DryRun         bool              `json:"dryRun,omitempty"`
	Components     []ComponentResult `json:"components"`
	Rebooting      bool              `json:"rebooting,omitempty"`
}

// Run upgrades the system directory to o.Version. Already at that version,
// it changes nothing and returns a Result with AlreadyCurrent set. On any
// error before the swap, the system directory is left exactly as it was.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if !o.DryRun {
		l, err := lock.Acquire(o.LockFile, o.Command)
		if err != nil {
			return nil, err
		}
		defer l.Release()
	}
	res, err := upgrade(ctx, &o)
	if err != nil || !o.Reboot || o.DryRun || res.AlreadyCurrent {
		return res, err
	}
	res.Rebooting = true
	return res, reboot.After(ctx, o.RebootDelay, o.Rebooter)
}

func (o *Options) defaults() error {
	if o.Source == nil {
		return errors.New("no release source: pass --source with a channel URL or a mirror directory")
	}
	if o.SystemDir == "" {
		o.SystemDir = DefaultSystemDir
	}
	if len(o.Components) == 0 {
		o.Components = DefaultComponents
	}
	if o.Arch == "" {
		o.Arch = release.Arch()
	}
	if o.LockFile == "" {
		o.LockFile = lock.DefaultPath
	}
	if o.Rebooter == nil {
		o.Rebooter = reboot.Auto()
	}
	if o.Hook == nil {
		o.Hook = func(string) {}
	}
	if o.Fail == nil {
		o.Fail = func(string) error { return nil }
	}
	if o.Command == "" {
		o.Command = "slipway ops upgrade"
	}
	return nil
}

// upgrade runs the steps between the lock and the reboot.
func upgrade(ctx context.Context, o *Options) (*Result, error) {
	if !o.DryRun {
		if err := finishSwap(o.SystemDir, o.Remount); err != nil {
			return nil, err
		}
	}
	p, err := newPlan(ctx, o)
	if err != nil {
		return nil, err
	}
	res := p.result()
	if res.AlreadyCurrent {
		if !o.DryRun && remount.IsWritable(o.SystemDir) {
			removeLeftovers(o.SystemDir) // a run killed after its last link
		}
		slog.Info("already at this version; nothing to do", "version", p.version)
		return res, nil
	}
	if o.DryRun {
		return res, nil
	}
	restore, err := writable(o.SystemDir, o.Remount)
	if err != nil {
		return nil, err
	}
	err = p.apply(ctx)
	if rerr := restore(); err == nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	if o.Sync {
		slog.Info("syncing filesystems")
		syncAll()
	}
	return p.result(), nil
}

// finishSwap completes a swap a crash cut short (layout.FinishSwap) before
// anything reads the links: the plan then starts from one release, and no
// stale journal outlives this run's own change of links.
func finishSwap(dir string, allowRemount bool) error {
	l := layout.New(dir)
	pending, err := l.PendingSwap()
	if err != nil || pending == nil {
		return err
	}
	restore, err := writable(dir, allowRemount)
	if err != nil {
		return err
	}
	_, err = l.FinishSwap()
	if rerr := restore(); err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	slog.Warn("finished a swap an earlier run did not (a crash or power loss between its links)", "links", pending)
	return nil
}

// writable makes sure the system directory can be changed, remounting its
// mount read-write when allowed; restore undoes that.
func writable(dir string, allowRemount bool) (restore func() error, err error) {
	probe := dir
	for !exists(probe) && probe != "/" && probe != "." {
		probe = filepath.Dir(probe)
	}
	if remount.IsWritable(probe) {
		return func() error { return nil }, nil
	}
	if !allowRemount {
		return nil, fmt.Errorf("%w: %s cannot be written; pass --remount to remount it read-write for the upgrade", ErrReadOnly, probe)
	}
	restore, err = remount.Writable(probe)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrReadOnly, err)
	}
	if !remount.IsWritable(probe) {
		_ = restore()
		return nil, fmt.Errorf("%w: %s is still not writable after the remount; check its permissions", ErrReadOnly, probe)
	}
	slog.Info("remounted read-write for the upgrade", "dir", probe)
	return restore, nil
}

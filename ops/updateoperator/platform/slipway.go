package platform

import (
	"context"
	"fmt"
	"sync"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/channel"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/reboot"
)

// Slipway is the k3os-layout host upgrader of upgrade/: check compares the
// channel's latest with the version running, prepare is upgrade.Stage,
// perform is upgrade.Activate (the atomic swap of the links), reboot is the
// Rebooter. What runs is decided once per boot (Running) and recorded;
// what `current` names beyond it is reported as staged.
type Slipway struct {
	SystemDir  string
	Source     channel.Source
	Components []layout.Component // default upgrade.DefaultComponents
	LockFile   string             // default the upgrader's
	Rebooter   reboot.Rebooter
	Remount    bool
	// BootID returns the running boot's ID (default: the kernel's, from
	// /proc/sys/kernel/random/boot_id).
	BootID func(context.Context) (string, error)
	// CmdlineFile is the kernel command line (default /proc/cmdline);
	// RecordFile where what each boot runs is recorded (default beside the
	// lock file, in the host's /run).
	CmdlineFile, RecordFile string

	mu     sync.Mutex
	target string // the version Check found, so prepare and perform agree
}

// Check resolves the channel's latest and compares it with the rootfs
// running; a `current` that names another rootfs is reported as staged.
func (s *Slipway) Check(ctx context.Context) (Status, error) {
	run, err := s.running(ctx)
	if err != nil {
		return Status{}, err
	}
	st := Status{Current: run[layout.Rootfs]}
	if cur, err := layout.New(s.SystemDir).Current(layout.Rootfs); err != nil {
		return st, fmt.Errorf("read the current version in %s: %w", s.SystemDir, err)
	} else if cur != st.Current {
		st.Staged = cur
	}
	latest, err := s.Source.Latest(ctx)
	if err != nil {
		return st, fmt.Errorf("resolve the latest release on %s: %w", s.Source, err)
	}
	s.mu.Lock()
	s.target = latest
	s.mu.Unlock()
	if latest != st.Current {
		st.Available = latest
	}
	return st, nil
}

func (s *Slipway) opts() upgrade.Options {
	s.mu.Lock()
	defer s.mu.Unlock()
	return upgrade.Options{SystemDir: s.SystemDir, Source: s.Source, Version: s.target, Components: s.Components,
		LockFile: s.LockFile, Remount: s.Remount, Sync: true, Command: "slipway update-operator agent"}
}

// Prepare stages the target into the system directory; nothing switches.
func (s *Slipway) Prepare(ctx context.Context) error {
	if _, err := s.running(ctx); err != nil { // recorded before anything moves
		return err
	}
	if _, err := upgrade.Stage(ctx, s.opts()); err != nil {
		return fmt.Errorf("stage the update: %w", err)
	}
	return nil
}

// Perform switches `current` to the staged target.
func (s *Slipway) Perform(ctx context.Context) error {
	if _, err := s.running(ctx); err != nil { // recorded before the links move
		return err
	}
	if _, err := upgrade.Activate(ctx, s.opts()); err != nil {
		return fmt.Errorf("activate the update: %w", err)
	}
	return nil
}

// Reboot asks the Rebooter for a reboot.
func (s *Slipway) Reboot(ctx context.Context) error {
	r := s.Rebooter
	if r == nil {
		r = reboot.Auto()
	}
	if err := r.Reboot(ctx); err != nil {
		return fmt.Errorf("reboot through %s: %w", r, err)
	}
	return nil
}

// Version is the rootfs this boot runs (not what `current` names: that is
// what the next boot starts).
func (s *Slipway) Version(ctx context.Context) (string, error) {
	run, err := s.running(ctx)
	if err != nil {
		return "", err
	}
	return run[layout.Rootfs], nil
}

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
// channel's latest with `current`, prepare is upgrade.Stage, perform is
// upgrade.Activate (the atomic swap), reboot is the Rebooter.
type Slipway struct {
	SystemDir  string
	Source     channel.Source
	Components []layout.Component // default upgrade.DefaultComponents
	LockFile   string             // default the upgrader's
	Rebooter   reboot.Rebooter
	Remount    bool

	mu     sync.Mutex
	target string // the version Check found, so prepare and perform agree
}

// Check resolves the channel's latest and compares it with the current rootfs.
func (s *Slipway) Check(ctx context.Context) (Status, error) {
	cur, err := s.Version(ctx)
	if err != nil {
		return Status{}, err
	}
	latest, err := s.Source.Latest(ctx)
	if err != nil {
		return Status{Current: cur}, fmt.Errorf("resolve the latest release on %s: %w", s.Source, err)
	}
	s.mu.Lock()
	s.target = latest
	s.mu.Unlock()
	st := Status{Current: cur}
	if latest != cur {
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
	if _, err := upgrade.Stage(ctx, s.opts()); err != nil {
		return fmt.Errorf("stage the update: %w", err)
	}
	return nil
}

// Perform switches `current` to the staged target.
func (s *Slipway) Perform(ctx context.Context) error {
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

// Version is the version the rootfs `current` link points at.
func (s *Slipway) Version(context.Context) (string, error) {
	v, err := layout.New(s.SystemDir).Current(layout.Rootfs)
	if err != nil {
		return "", fmt.Errorf("read the current version in %s: %w", s.SystemDir, err)
	}
	return v, nil
}

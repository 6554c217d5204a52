package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/lock"
	"slipway.dev/slipway/upgrade/remount"
)

// VersionDir is what Staged reads of one version folder of a component.
type VersionDir struct {
	Name string
	// Marked: the folder holds the upgrader's completion marker (it was
	// installed by a slipway upgrade; a folder without one is left alone).
	Marked    bool
	Installed time.Time // from the marker
}

// Staged returns the version folders of one component that a reset
// removes: installed by the upgrader (marked), neither `current` nor
// `previous`, and installed after `current` was (so a release kept from
// before the running one is not touched). A component with no `current`
// link has nothing staged to discard.
func Staged(dirs []VersionDir, current, previous string) []string {
	if current == "" {
		return nil
	}
	var cur *VersionDir
	for i := range dirs {
		if dirs[i].Name == current {
			cur = &dirs[i]
		}
	}
	var out []string
	for _, d := range dirs {
		if d.Name == current || d.Name == previous || !d.Marked {
			continue
		}
		if cur != nil && cur.Marked && !d.Installed.After(cur.Installed) {
			continue // older than what runs: a release kept, not a staged one
		}
		out = append(out, d.Name)
	}
	return out
}

// Reset undoes a failed update on the host: an activation (perform moved
// `current` to a version this boot does not run) is undone, `current`
// pointed back at what runs and `previous` at what was activated, so the
// next boot, planned or not, runs the same version; and the version
// folders a prepare staged and no perform activated are removed (see
// Staged). All under the upgrade lock.
func (s *Slipway) Reset(ctx context.Context) error {
	run, err := s.running(ctx)
	if err != nil {
		return err
	}
	o := s.opts()
	lockFile := o.LockFile
	if lockFile == "" {
		lockFile = lock.DefaultPath
	}
	l, err := lock.Acquire(lockFile, o.Command)
	if err != nil {
		return fmt.Errorf("reset the staged update: %w", err)
	}
	defer l.Release()
	comps := s.Components
	if len(comps) == 0 {
		comps = upgrade.DefaultComponents
	}
	lay := layout.New(s.SystemDir)
	undo, err := activated(lay, comps, run)
	if err != nil {
		return err
	}
	var remove []string
	for _, c := range comps {
		prev, err := lay.Previous(c)
		if err != nil {
			return err
		}
		for _, u := range undo {
			if u.c == c {
				prev = u.activated // kept as previous: the retry's prepare finds it verified
			}
		}
		staged, err := stagedDirs(lay, c, run[c], prev)
		if err != nil {
			return err
		}
		remove = append(remove, staged...)
	}
	if len(remove) == 0 && len(undo) == 0 {
		return nil
	}
	if !remount.IsWritable(s.SystemDir) && s.Remount {
		restore, err := remount.Writable(s.SystemDir)
		if err != nil {
			return fmt.Errorf("remount %s read-write to reset the staged update: %w", s.SystemDir, err)
		}
		defer func() { _ = restore() }()
	}
	for _, u := range undo {
		if err := lay.SetLink(u.c, layout.PreviousLink, u.activated); err != nil {
			return fmt.Errorf("undo the activation of %s %s: %w", u.c, u.activated, err)
		}
		if err := lay.SetLink(u.c, layout.CurrentLink, u.running); err != nil {
			return fmt.Errorf("undo the activation of %s %s: %w", u.c, u.activated, err)
		}
	}
	for _, dir := range remove {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove the staged %s: %w", dir, err)
		}
	}
	return nil
}

type activation struct {
	c                  layout.Component
	activated, running string
}

// activated lists the components whose `current` names a version other
// than the one running: the activations to undo. A running version whose
// folder is gone cannot be pointed at: that is an error saying what to do.
func activated(lay layout.Layout, comps []layout.Component, run map[layout.Component]string) ([]activation, error) {
	var out []activation
	for _, c := range comps {
		cur, err := lay.Current(c)
		if err != nil {
			return nil, err
		}
		if run[c] == "" || cur == run[c] {
			continue
		}
		if fi, err := os.Stat(lay.VersionDir(c, run[c])); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("undo the activation of %s %s: the running %s is not in %s; point %s/current at a version by hand or run `slipway ops rollback`",
				c, cur, run[c], lay.Dir(c), c)
		}
		out = append(out, activation{c: c, activated: cur, running: run[c]})
	}
	return out, nil
}

// stagedDirs reads the version folders of c and returns the paths of the
// staged ones; cur and prev are what `current` and `previous` name once an
// activation is undone.
func stagedDirs(lay layout.Layout, c layout.Component, cur, prev string) ([]string, error) {
	entries, err := os.ReadDir(lay.Dir(c))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", lay.Dir(c), err)
	}
	var dirs []VersionDir
	for _, e := range entries {
		if !e.IsDir() || layout.ValidVersion(e.Name()) != nil {
			continue // links, files, and the upgrader's temporary folders
		}
		d := VersionDir{Name: e.Name()}
		if b, err := os.ReadFile(filepath.Join(lay.VersionDir(c, e.Name()), upgrade.MarkerFile)); err == nil {
			var m upgrade.Marker
			if json.Unmarshal(b, &m) == nil {
				d.Marked, d.Installed = true, m.Installed
			}
		}
		dirs = append(dirs, d)
	}
	var out []string
	for _, name := range Staged(dirs, cur, prev) {
		out = append(out, lay.VersionDir(c, name))
	}
	return out, nil
}

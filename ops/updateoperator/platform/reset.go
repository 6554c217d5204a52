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

// Reset removes the version folders a prepare staged and no perform
// activated (see Staged), under the upgrade lock. After a perform, the
// staged release is `current`: it stays (the next boot runs it; a
// rollback is `slipway ops rollback`).
func (s *Slipway) Reset(context.Context) error {
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
	var remove []string
	for _, c := range comps {
		staged, err := stagedDirs(lay, c)
		if err != nil {
			return err
		}
		remove = append(remove, staged...)
	}
	if len(remove) == 0 {
		return nil
	}
	if !remount.IsWritable(s.SystemDir) && s.Remount {
		restore, err := remount.Writable(s.SystemDir)
		if err != nil {
			return fmt.Errorf("remount %s read-write to reset the staged update: %w", s.SystemDir, err)
		}
		defer func() { _ = restore() }()
	}
	for _, dir := range remove {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove the staged %s: %w", dir, err)
		}
	}
	return nil
}

// stagedDirs reads the version folders of c and returns the paths of the
// staged ones.
func stagedDirs(lay layout.Layout, c layout.Component) ([]string, error) {
	cur, err := lay.Current(c)
	if err != nil {
		return nil, err
	}
	prev, err := lay.Previous(c)
	if err != nil {
		return nil, err
	}
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

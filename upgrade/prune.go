package upgrade

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/lock"
)

// A staged release (Stage without Activate) sits in the system directory
// beside `current` and `previous` until it is activated or no longer
// wanted. Prestaged lists such releases; Prune removes the ones not kept.

// PruneOptions of one prune.
type PruneOptions struct {
	SystemDir  string
	Components []layout.Component // default: every component
	// Keep names releases whose folders stay (besides current and previous).
	Keep     []string
	Remount  bool
	LockFile string
	Command  string
	DryRun   bool
}

// PruneResult lists the folders removed (or, with DryRun, that would be).
type PruneResult struct {
	SystemDir string   `json:"systemDir"`
	Removed   []string `json:"removed"` // "<component>/<version>"
	DryRun    bool     `json:"dryRun,omitempty"`
}

// Prestaged returns the releases staged in systemDir and not active: the
// rootfs version folders slipway installed completely (with a marker)
// that neither `current` nor `previous` names, sorted. It takes no lock
// and reads a read-only system directory.
func Prestaged(systemDir string) ([]string, error) {
	l := layout.New(systemDir)
	ents, err := os.ReadDir(l.Dir(layout.Rootfs))
	if os.IsNotExist(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("read the staged releases: %w", err)
	}
	active := activeVersions(l, layout.Rootfs)
	var out []string
	for _, e := range ents {
		v := e.Name()
		if !e.IsDir() || layout.ValidVersion(v) != nil || active[v] {
			continue
		}
		if m := readMarker(l.VersionDir(layout.Rootfs, v)); m != nil && m.Release == v {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Prune removes, under the upgrade lock, every version folder slipway
// installed (it has a marker) that neither `current` nor `previous` names
// and whose release is not kept. Folders k3os installed (no marker) are
// never touched. Each folder is first renamed into a staging folder of the
// system directory (atomic: its marker never outlives its files, so a
// half-removed folder is never taken for a complete one), then deleted; a
// crash leaves a staging folder that the next upgrade or prune removes.
// What boots is never changed.
func Prune(_ context.Context, o PruneOptions) (*PruneResult, error) {
	if o.SystemDir == "" {
		o.SystemDir = DefaultSystemDir
	}
	if len(o.Components) == 0 {
		o.Components = []layout.Component{layout.Rootfs, layout.Kernel, layout.K3s}
	}
	if o.LockFile == "" {
		o.LockFile = lock.DefaultPath
	}
	if o.Command == "" {
		o.Command = "slipway ops prune"
	}
	res := &PruneResult{SystemDir: o.SystemDir, DryRun: o.DryRun, Removed: []string{}}
	if !o.DryRun {
		l, err := lock.Acquire(o.LockFile, o.Command)
		if err != nil {
			return nil, err
		}
		defer l.Release()
	}
	doomed := pruneList(o)
	res.Removed = doomed
	if o.DryRun || len(doomed) == 0 {
		return res, nil
	}
	restore, err := writable(o.SystemDir, o.Remount)
	if err != nil {
		return nil, err
	}
	err = removeFolders(o.SystemDir, doomed)
	if rerr := restore(); err == nil {
		err = rerr
	}
	return res, err
}

// pruneList is "<component>/<version>" of every folder Prune removes.
func pruneList(o PruneOptions) []string {
	l := layout.New(o.SystemDir)
	var out []string
	for _, c := range o.Components {
		ents, _ := os.ReadDir(l.Dir(c))
		active := activeVersions(l, c)
		for _, e := range ents {
			v := e.Name()
			if !e.IsDir() || layout.ValidVersion(v) != nil || active[v] {
				continue
			}
			m := readMarker(l.VersionDir(c, v))
			if m == nil || slices.Contains(o.Keep, m.Release) {
				continue
			}
			out = append(out, string(c)+"/"+v)
		}
	}
	return out
}

// activeVersions are the versions current and previous of c name.
func activeVersions(l layout.Layout, c layout.Component) map[string]bool {
	out := map[string]bool{}
	for _, name := range []string{layout.CurrentLink, layout.PreviousLink} {
		if v, err := l.Link(c, name); err == nil && v != "" {
			out[v] = true
		}
	}
	return out
}

// removeFolders moves each folder into one staging folder, then deletes it.
func removeFolders(root string, folders []string) error {
	trash, err := os.MkdirTemp(root, stagingPrefix+"prune-")
	if err != nil {
		return noSpace(fmt.Errorf("create the folder of what is pruned: %w", err))
	}
	defer os.RemoveAll(trash)
	for i, f := range folders {
		src := filepath.Join(root, f)
		if err := os.Rename(src, filepath.Join(trash, fmt.Sprint(i))); err != nil {
			return fmt.Errorf("remove staged %s: %w", f, err)
		}
		if err := layout.SyncDir(filepath.Dir(src)); err != nil {
			return err
		}
		slog.Info("removed a staged release", "folder", f)
	}
	return nil
}

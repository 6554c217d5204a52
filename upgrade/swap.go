package upgrade

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/release"
)

// apply stages, verifies and swaps. Until the first rename, nothing outside
// the staging folder has changed, and every error removes that folder.
func (p *plan) apply(ctx context.Context) error {
	if err := p.stageAll(ctx); err != nil {
		return err
	}
	return p.relinkAll()
}

// stageAll downloads, verifies and renames the staged components into
// their version folders (with markers), leaving every link as it was.
func (p *plan) stageAll(ctx context.Context) error {
	root := p.o.SystemDir
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("create system directory: %w", err)
	}
	removeLeftovers(root)
	downloads, err := p.open(ctx)
	if err != nil {
		return err
	}
	defer closeAll(downloads)
	if err := checkSpace(root, downloads); err != nil {
		return err
	}
	stage, err := os.MkdirTemp(root, stagingPrefix)
	if err != nil {
		return noSpace(fmt.Errorf("create staging folder: %w", err))
	}
	defer os.RemoveAll(stage)
	if err := p.stage(downloads, stage); err != nil {
		return noSpace(err)
	}
	if err := p.o.Fail("staged"); err != nil {
		return noSpace(fmt.Errorf("stage in %s: %w", stage, err))
	}
	p.o.Hook("staged")
	for _, cp := range p.comps {
		if err := p.commit(cp, stage); err != nil {
			return err
		}
	}
	return nil
}

// relinkAll moves the previous and current links of every component as
// one swap (layout.SetLinks: a crash between two links is finished at the
// next boot, never booted half done).
func (p *plan) relinkAll() error {
	var changes []layout.LinkChange
	for _, cp := range p.comps {
		changes = append(changes, cp.linkChanges()...)
	}
	if len(changes) == 0 {
		return nil
	}
	return p.l.SetLinks(changes, func(ch layout.LinkChange) {
		if ch.Link == layout.CurrentLink && !p.setsPrevious(ch.Component) {
			p.o.Hook("previous:" + string(ch.Component))
		}
		p.o.Hook(ch.Link + ":" + string(ch.Component))
	})
}

// stage writes every staged component under stage, then its markers, then
// flushes the whole filesystem once (syncfs) so the renames that follow never
// expose a folder whose data is not on disk.
func (p *plan) stage(downloads []*download, stage string) error {
	kdir := filepath.Join(stage, string(layout.Kernel), p.kver)
	for _, d := range downloads {
		slog.Info("staging", "artifact", d.name)
		var err error
		switch d.name {
		case release.RootfsArtifact(p.o.Arch):
			err = p.stageRootfs(d, stage)
		case release.KernelArtifact(p.o.Arch):
			err = stageFile(d, filepath.Join(kdir, release.KernelFile), p.sums[d.name])
		case release.InitrdArtifact(p.o.Arch):
			err = stageFile(d, filepath.Join(kdir, release.InitrdFile), p.sums[d.name])
		}
		if err != nil {
			return err
		}
	}
	for _, cp := range p.comps {
		if cp.action != ActionStage {
			continue
		}
		m := Marker{Release: p.version, Artifacts: cp.sums, Installed: time.Now().UTC()}
		if err := writeMarker(filepath.Join(stage, string(cp.c), cp.to), m); err != nil {
			return err
		}
	}
	return syncFS(stage)
}

// commit renames a staged folder into place. A folder already there (left
// incomplete by a crash, or installed without a marker) is exchanged
// atomically with the staged one, then removed with the staging folder.
func (p *plan) commit(cp *compPlan, stage string) error {
	if cp.action != ActionStage {
		return nil
	}
	dir := p.l.Dir(cp.c)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	src, dst := filepath.Join(stage, string(cp.c), cp.to), p.l.VersionDir(cp.c, cp.to)
	if err := moveInto(src, dst); err != nil {
		return fmt.Errorf("move %s into place: %w", dst, err)
	}
	if err := layout.SyncDir(dir); err != nil {
		return err
	}
	p.o.Hook("renamed:" + string(cp.c))
	return nil
}

func moveInto(src, dst string) error {
	if !exists(dst) {
		return os.Rename(src, dst)
	}
	err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// No RENAME_EXCHANGE on this filesystem: move the old folder aside first.
		old := src + ".old"
		if err := os.Rename(dst, old); err != nil {
			return err
		}
		return os.Rename(src, dst)
	}
	return err
}

// linkChanges are the links a component's swap sets: previous at the old
// current, then current at the new version.
func (cp *compPlan) linkChanges() []layout.LinkChange {
	if cp.action == ActionCurrent {
		return nil
	}
	var out []layout.LinkChange
	if cp.setsPrevious() {
		out = append(out, layout.LinkChange{Component: cp.c, Link: layout.PreviousLink, Version: cp.from})
	}
	return append(out, layout.LinkChange{Component: cp.c, Link: layout.CurrentLink, Version: cp.to})
}

func (cp *compPlan) setsPrevious() bool { return cp.from != "" && cp.from != cp.to }

// setsPrevious says whether the swap moves c's previous link.
func (p *plan) setsPrevious(c layout.Component) bool {
	for _, cp := range p.comps {
		if cp.c == c {
			return cp.action != ActionCurrent && cp.setsPrevious()
		}
	}
	return false
}

// removeLeftovers deletes staging folders of runs that crashed.
func removeLeftovers(root string) {
	old, _ := filepath.Glob(filepath.Join(root, stagingPrefix+"*"))
	for _, d := range old {
		slog.Info("removing a staging folder left by an interrupted run", "dir", d)
		_ = os.RemoveAll(d)
	}
}

// checkSpace fails before staging when the filesystem lacks room.
func checkSpace(root string, downloads []*download) error {
	if len(downloads) == 0 {
		return nil // relinking only
	}
	var rootfs int64
	var other []int64
	for _, d := range downloads {
		if strings.HasSuffix(d.name, ".tar.gz") {
			rootfs = d.size
		} else {
			other = append(other, d.size)
		}
	}
	need := SpaceNeeded(rootfs, other...)
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return fmt.Errorf("check free space: %w", err)
	}
	free := int64(st.Bavail) * st.Bsize
	if free < need {
		return fmt.Errorf("%w in %s: %d MiB free, about %d MiB needed; remove old versions (keep current and previous) and retry", ErrNoSpace, root, free>>20, need>>20)
	}
	return nil
}

func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("sync staged files: %w", err)
	}
	return nil
}

func syncAll() { unix.Sync() }

func isNoSpace(err error) bool { return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) }

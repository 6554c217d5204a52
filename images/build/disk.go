package build

import (
	"compress/gzip"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"slipway.dev/slipway/upgrade/extract"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/release"
)

// SystemSubdir is where the system directory sits on the system disk.
const SystemSubdir = "k3os/system"

// installSystem lays the Install release into a fresh system directory the
// way k3os's installer did (rootfs tarball extracted with
// --strip-components=3, kernel files under kernel/<kversion>/, current
// links), then writes it as system.img.
func installSystem(ctx context.Context, o Options, r *Result, work string) error {
	state := filepath.Join(work, "state")
	sys := filepath.Join(state, SystemSubdir)
	if err := os.MkdirAll(sys, 0o755); err != nil {
		return fmt.Errorf("system dir: %w", err)
	}
	arch := release.Arch()
	rel := filepath.Join(r.Mirror, o.Install)
	if err := extractRootfs(filepath.Join(rel, release.RootfsArtifact(arch)), sys); err != nil {
		return err
	}
	kv := r.KernelVersions[o.Install]
	l := layout.New(sys)
	if err := os.MkdirAll(l.VersionDir(layout.Kernel, kv), 0o755); err != nil {
		return fmt.Errorf("kernel dir: %w", err)
	}
	for src, dst := range map[string]string{release.KernelArtifact(arch): release.KernelFile, release.InitrdArtifact(arch): release.InitrdFile} {
		if err := copyFile(filepath.Join(rel, src), filepath.Join(l.VersionDir(layout.Kernel, kv), dst), 0o644); err != nil {
			return err
		}
	}
	if err := l.SetLink(layout.Kernel, layout.CurrentLink, kv); err != nil {
		return err
	}
	return mkfs(ctx, state, r.SystemImage, "SLIPWAY_STATE", o.DiskMiB)
}

// extractRootfs unpacks the rootfs tarball into sys, dropping the first
// RootfsStrip path elements as k3os's installer did, with the same confined
// extractor `ops upgrade` uses.
func extractRootfs(tarball, sys string) error {
	f, err := os.Open(tarball)
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("rootfs %s: %w", tarball, err)
	}
	root, err := os.OpenRoot(sys)
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	defer root.Close()
	strip := func(name string) (string, bool) {
		parts := strings.SplitN(name, "/", release.RootfsStrip+1)
		if len(parts) <= release.RootfsStrip || parts[release.RootfsStrip] == "" {
			return "", false
		}
		return parts[release.RootfsStrip], true
	}
	if _, err := extract.Tar(gz, root, extract.Options{Map: strip}); err != nil {
		return fmt.Errorf("extract %s: %w", tarball, err)
	}
	return nil
}

// mkfs writes an ext4 image of folder src (mke2fs -d, no root needed);
// sizeMiB 0 sizes it to the content plus room.
func mkfs(ctx context.Context, src, img, label string, sizeMiB int) error {
	if sizeMiB == 0 {
		n, err := treeSize(src)
		if err != nil {
			return err
		}
		sizeMiB = int(n*3/2>>20) + 32
	}
	_ = os.Remove(img)
	cmd := exec.CommandContext(ctx, "mke2fs", "-q", "-F", "-t", "ext4", "-L", label, "-E", "root_owner=0:0",
		"-d", src, img, strconv.Itoa(sizeMiB)+"M")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mke2fs %s: %w: %s (install e2fsprogs: scripts/deps)", img, err, out)
	}
	return nil
}

func treeSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
		return nil
	})
	return n, err
}

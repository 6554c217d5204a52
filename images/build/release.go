package build

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"

	"slipway.dev/slipway/upgrade/release"
)

// brokenInit is the rootfs init of a version built broken: PID 1 exits, the
// kernel panics, and with panic=-1 the machine resets into the loader.
const brokenInit = `#!/bin/sh
echo "slipway: rootfs $(cat "$(dirname "$0")/version") is broken on purpose: its init exits"
exit 1
`

// k3sStub stands in for k3s: the test images boot no cluster.
const k3sStub = "#!/bin/sh\necho 'k3s stub: this test image runs no cluster' >&2\nexit 1\n"

// writeRelease writes the k3os-format artifacts of v into dir (the
// version's folder of a mirror) and returns the kernel version name.
func writeRelease(ctx context.Context, o Options, d *debian, v Version, dir, work string) error {
	arch := release.Arch()
	kv := KernelVersion(d.kabi, v.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("release %s: %w", v.Name, err)
	}
	if err := kernelSquashfs(ctx, d, kv, work, filepath.Join(dir, release.KernelArtifact(arch))); err != nil {
		return err
	}
	if err := versionInitrd(filepath.Join(dir, release.InitrdArtifact(arch)), d, o.Overlay, o.Extra, kv); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, release.KernelVersionArtifact(arch)), []byte(kv+"\n"), 0o644); err != nil {
		return fmt.Errorf("release %s: %w", v.Name, err)
	}
	if err := rootfsTarball(o, v, filepath.Join(dir, release.RootfsArtifact(arch))); err != nil {
		return err
	}
	return writeSums(dir, arch)
}

// KernelVersion names the kernel of release v: the Debian kernel ABI plus
// the release, since releases may carry the same kernel binary (k3os's
// kernel version names are unique per build).
func KernelVersion(kabi, v string) string { return kabi + "-" + v }

// kernelSquashfs packs vmlinuz and a kernel-version file (and the boot
// modules) as k3os's kernel.squashfs.
func kernelSquashfs(ctx context.Context, d *debian, kv, work, out string) error {
	src := filepath.Join(work, "kernel-"+kv)
	mods := filepath.Join(src, "lib", "modules", d.kabi)
	if err := os.MkdirAll(mods, 0o755); err != nil {
		return fmt.Errorf("kernel squashfs: %w", err)
	}
	if err := copyFile(d.vmlinuz, filepath.Join(src, "vmlinuz"), 0o644); err != nil {
		return err
	}
	for _, m := range BootModules {
		if err := copyFile(d.modules[m], filepath.Join(mods, m+".ko"), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(src, "kernel-version"), []byte(kv+"\n"), 0o644); err != nil {
		return fmt.Errorf("kernel squashfs: %w", err)
	}
	_ = os.Remove(out)
	// vmlinuz is compressed already: storing it uncompressed saves build
	// time and the loader's reads under emulation.
	cmd := exec.CommandContext(ctx, "mksquashfs", src, out, "-noI", "-noD", "-noF", "-noX", "-all-root", "-noappend", "-quiet", "-no-progress")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mksquashfs %s: %w: %s (install squashfs-tools: scripts/deps)", out, err, b)
	}
	return nil
}

// rootfsTarball writes k3os's rootfs tarball layout:
// <v>/k3os/system/k3os/<v>/{k3os,init,version}, <v>/k3os/system/k3os/current,
// <v>/k3os/system/k3s/<v>-k3s/k3s (a stub: these images run no cluster) and
// <v>/k3os/system/k3s/current.
func rootfsTarball(o Options, v Version, out string) error {
	hdrs, data, err := rootfsEntries(o, v)
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("rootfs tarball: %w", err)
	}
	defer f.Close()
	gz, err := gzip.NewWriterLevel(f, gzip.BestSpeed)
	if err != nil {
		return fmt.Errorf("rootfs tarball: %w", err)
	}
	tw := tar.NewWriter(gz)
	for i, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("rootfs tarball: %w", err)
		}
		if _, err := tw.Write(data[i]); err != nil {
			return fmt.Errorf("rootfs tarball: %w", err)
		}
	}
	for _, c := range []io.Closer{tw, gz} {
		if err := c.Close(); err != nil {
			return fmt.Errorf("rootfs tarball: %w", err)
		}
	}
	return f.Close()
}

// rootfsEntries lists the tarball's headers, in order, with each one's data.
func rootfsEntries(o Options, v Version) ([]*tar.Header, [][]byte, error) {
	base := path.Join(v.Name, "k3os", "system", "k3os")
	k3s := path.Join(v.Name, "k3os", "system", "k3s")
	init, err := os.ReadFile(filepath.Join(o.Overlay, "usr", "lib", "slipway", "rootfs-init"))
	if err != nil {
		return nil, nil, fmt.Errorf("rootfs init: %w", err)
	}
	if v.Broken {
		init = []byte(brokenInit)
	}
	bin, err := os.ReadFile(o.Slipway)
	if err != nil {
		return nil, nil, fmt.Errorf("rootfs binary: %w", err)
	}
	var hdrs []*tar.Header
	var data [][]byte
	add := func(h *tar.Header, b []byte) {
		h.Size = int64(len(b))
		hdrs, data = append(hdrs, h), append(data, b)
	}
	for _, dir := range []string{v.Name, v.Name + "/k3os", v.Name + "/k3os/system", base, base + "/" + v.Name, k3s, k3s + "/" + v.Name + "-k3s"} {
		add(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755}, nil)
	}
	add(&tar.Header{Typeflag: tar.TypeReg, Name: base + "/" + v.Name + "/k3os", Mode: 0o755}, bin)
	add(&tar.Header{Typeflag: tar.TypeReg, Name: base + "/" + v.Name + "/init", Mode: 0o755}, init)
	add(&tar.Header{Typeflag: tar.TypeReg, Name: base + "/" + v.Name + "/version", Mode: 0o644}, []byte(v.Name+"\n"))
	add(&tar.Header{Typeflag: tar.TypeReg, Name: k3s + "/" + v.Name + "-k3s/k3s", Mode: 0o755}, []byte(k3sStub))
	for _, l := range [][2]string{{base + "/current", v.Name}, {k3s + "/current", v.Name + "-k3s"}} {
		add(&tar.Header{Typeflag: tar.TypeSymlink, Name: l[0], Linkname: l[1]}, nil)
	}
	return hdrs, data, nil
}

// writeSums writes sha256sum-<arch>.txt over the artifacts in dir.
func writeSums(dir, arch string) error {
	names := []string{release.RootfsArtifact(arch), release.KernelArtifact(arch), release.InitrdArtifact(arch), release.KernelVersionArtifact(arch)}
	sums := release.Sums{}
	for _, n := range names {
		s, err := sha256File(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		sums[n] = s
	}
	f, err := os.Create(filepath.Join(dir, release.SumsArtifact(arch)))
	if err != nil {
		return fmt.Errorf("sums: %w", err)
	}
	if err := release.Format(f, sums, names); err != nil {
		f.Close()
		return fmt.Errorf("sums: %w", err)
	}
	return f.Close()
}

func sha256File(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func copyFile(src, dst string, perm os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := os.WriteFile(dst, b, perm); err != nil {
		return fmt.Errorf("copy to %s: %w", dst, err)
	}
	return nil
}

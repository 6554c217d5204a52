package build

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// KernelMetaPackage is the Debian package that names the current cloud
// kernel.
const KernelMetaPackage = "linux-image-cloud-amd64"

// BootModules are the kernel modules (in load order) an initramfs needs to
// reach a virtio disk, mount a squashfs through a loop device and read
// qemu's fw_cfg.
var BootModules = []string{
	"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
	"virtio_blk", "loop", "squashfs", "qemu_fw_cfg",
}

// debian is an unpacked kernel and busybox.
type debian struct {
	root    string // dpkg-deb -x target
	kabi    string // e.g. 6.1.0-56-cloud-amd64
	vmlinuz string
	busybox string
	modules map[string]string // module name -> .ko path
}

// fetchDebian downloads (apt-get download, cached) and unpacks the kernel
// and busybox-static packages; no root file system or chroot is involved.
func fetchDebian(ctx context.Context, cache, kernelPkg string) (*debian, error) {
	if kernelPkg == "" {
		pkg, err := resolveKernelPackage(ctx)
		if err != nil {
			return nil, err
		}
		kernelPkg = pkg
	}
	root := filepath.Join(cache, "root-"+kernelPkg)
	if err := unpackOnce(ctx, cache, root, kernelPkg, "busybox-static"); err != nil {
		return nil, err
	}
	d := &debian{root: root, busybox: filepath.Join(root, "bin", "busybox"), modules: map[string]string{}}
	vm, err := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if err != nil || len(vm) != 1 {
		return nil, fmt.Errorf("%s holds %d kernels, want one: remove %s and build again", kernelPkg, len(vm), root)
	}
	d.vmlinuz = vm[0]
	d.kabi = strings.TrimPrefix(filepath.Base(vm[0]), "vmlinuz-")
	err = filepath.WalkDir(filepath.Join(root, "lib", "modules", d.kabi), func(p string, e fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".ko") {
			d.modules[strings.TrimSuffix(filepath.Base(p), ".ko")] = p
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list modules of %s: %w", d.kabi, err)
	}
	for _, m := range BootModules {
		if d.modules[m] == "" {
			return nil, fmt.Errorf("kernel %s has no module %s: it may be built in; adjust BootModules", d.kabi, m)
		}
	}
	return d, nil
}

// resolveKernelPackage asks apt which versioned kernel the metapackage names.
func resolveKernelPackage(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", "--important", KernelMetaPackage).Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s: %w (run apt-get update, or pass the kernel package)", KernelMetaPackage, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if dep, ok := strings.CutPrefix(strings.TrimSpace(line), "Depends: "); ok && strings.HasPrefix(dep, "linux-image-") {
			return dep, nil
		}
	}
	return "", fmt.Errorf("apt-cache names no kernel for %s: run apt-get update", KernelMetaPackage)
}

// PreviousKernelPackage names the kernel package of the same series just
// before the one linux-image-cloud-amd64 names (e.g. linux-image-6.1.0-55-
// cloud-amd64 before -56): the older kernel of a release pair whose
// kernels really differ.
func PreviousKernelPackage(ctx context.Context) (string, error) {
	cur, err := resolveKernelPackage(ctx)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "apt-cache", "pkgnames", "linux-image-").Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache pkgnames: %w (run apt-get update)", err)
	}
	prev, err := previousInSeries(cur, strings.Fields(string(out)))
	if err != nil {
		return "", fmt.Errorf("%w: run apt-get update, or pin both releases' kernels", err)
	}
	return prev, nil
}

// kernelSeries splits linux-image-<series>-<abi>-<flavour> (Debian's
// versioned kernel package names, e.g. linux-image-6.1.0-56-cloud-amd64).
var kernelSeries = regexp.MustCompile(`^linux-image-(\d+\.\d+\.\d+)-(\d+)-(.+)$`)

// previousInSeries picks, among names, the package of cur's series and
// flavour with the highest ABI number below cur's.
func previousInSeries(cur string, names []string) (string, error) {
	m := kernelSeries.FindStringSubmatch(cur)
	if m == nil {
		return "", fmt.Errorf("kernel package %q is not named linux-image-<series>-<abi>-<flavour>", cur)
	}
	curABI, _ := strconv.Atoi(m[2])
	best, bestABI := "", -1
	for _, n := range names {
		o := kernelSeries.FindStringSubmatch(n)
		if o == nil || o[1] != m[1] || o[3] != m[3] {
			continue
		}
		if abi, _ := strconv.Atoi(o[2]); abi < curABI && abi > bestABI {
			best, bestABI = n, abi
		}
	}
	if best == "" {
		return "", fmt.Errorf("apt knows no kernel of series %s-%s older than %s", m[1], m[3], cur)
	}
	return best, nil
}

// unpack downloads pkgs into cache and extracts them into root.
// unpackOnce unpacks pkgs into root unless a finished unpack is there
// (its .done file), under the cache's lock: two builds at once (two test
// processes) never download into, or unpack over, the same folder.
func unpackOnce(ctx context.Context, cache, root string, pkgs ...string) error {
	if _, err := os.Stat(filepath.Join(root, ".done")); err == nil {
		return nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("package cache lock: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	if _, err := os.Stat(filepath.Join(root, ".done")); err == nil {
		return nil // unpacked by the build that held the lock
	}
	return unpack(ctx, cache, root, pkgs...)
}

func unpack(ctx context.Context, cache, root string, pkgs ...string) error {
	debs := filepath.Join(cache, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return fmt.Errorf("deb cache: %w", err)
	}
	args := append([]string{"download"}, pkgs...)
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Dir = debs
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download %s: %w: %s (run apt-get update first)", strings.Join(pkgs, " "), err, out)
	}
	if err := os.RemoveAll(root); err != nil {
		return fmt.Errorf("clean %s: %w", root, err)
	}
	for _, p := range pkgs {
		files, err := filepath.Glob(filepath.Join(debs, p+"_*.deb"))
		if err != nil || len(files) == 0 {
			return errors.Join(fmt.Errorf("no .deb for %s in %s", p, debs), err)
		}
		for _, f := range files {
			if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", f, root).CombinedOutput(); err != nil {
				return fmt.Errorf("dpkg-deb -x %s: %w: %s", f, err, out)
			}
		}
	}
	return os.WriteFile(filepath.Join(root, ".done"), nil, 0o644)
}

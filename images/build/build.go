// Package build assembles the bootable test OS without Docker or root: from
// Debian's cloud kernel and busybox-static (apt-get download + dpkg-deb -x),
// the overlay and the slipway binary it writes
//
//	<out>/boot/{vmlinuz,initrd}   the fixed stage-0 loader qemu boots
//	<out>/mirror/<v>/...          k3os-format releases with sha256sum files
//	<out>/system.img              ext4 disk holding k3os/system at the installed version
//	<out>/mirror.img              ext4 disk (label SLIPWAY_MIRROR) holding the mirror
package build

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Version is one release to build.
type Version struct {
	Name string
	// Broken builds a rootfs whose init exits, so the version never
	// confirms.
	Broken bool
	// KernelPackage gives this release a Debian kernel of its own ("" =
	// Options.KernelPackage): a release whose kernel really differs, so
	// that booting it shows in `uname -r`.
	KernelPackage string
}

// Options configure Run.
type Options struct {
	Out     string // output folder
	Cache   string // downloaded and unpacked Debian packages
	Slipway string // the static slipway binary
	Overlay string // the overlay folder (its init becomes each initrd's /init)
	// Extra is a second overlay folder laid over Overlay in each version's
	// initrd (a file in both is Extra's), or several separated by ':' laid
	// in order; "" = none. The real-node images use it to start containerd
	// and the kubelet, the k3os-like node a third for OpenRC.
	Extra    string
	Versions []Version
	// Install is the version installed on system.img (default: the first).
	Install string
	// KernelPackage pins the Debian kernel package; "" asks apt which one
	// linux-image-cloud-amd64 names.
	KernelPackage string
	DiskMiB       int // system disk size (default 1024, sparse)
}

// Result names what Run wrote.
type Result struct {
	Kernel, Initrd      string // stage 0
	SystemImage, Mirror string
	MirrorImage         string
	KernelVersions      map[string]string // release -> kernel version name
	KernelABI           string            // the loader's kernel (uname -r)
	KernelABIs          map[string]string // release -> its kernel's uname -r
	Steps               map[string]time.Duration
}

// Run builds everything into o.Out.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	r := &Result{
		Kernel: filepath.Join(o.Out, "boot", "vmlinuz"), Initrd: filepath.Join(o.Out, "boot", "initrd"),
		SystemImage: filepath.Join(o.Out, "system.img"), Mirror: filepath.Join(o.Out, "mirror"),
		MirrorImage: filepath.Join(o.Out, "mirror.img"), KernelVersions: map[string]string{},
		KernelABIs: map[string]string{}, Steps: map[string]time.Duration{},
	}
	var d *debian
	work := filepath.Join(o.Out, "work")
	steps := []struct {
		name string
		fn   func() error
	}{
		{"fetch", func() (err error) { d, err = fetchDebian(ctx, o.Cache, o.KernelPackage); return err }},
		{"clean", func() error { return clean(o.Out, work, r.Mirror) }},
		{"stage0", func() error {
			r.KernelABI = d.kabi
			if err := copyFile(d.vmlinuz, r.Kernel, 0o644); err != nil {
				return err
			}
			return stage0Initrd(r.Initrd, d, o.Slipway)
		}},
		{"releases", func() error {
			for _, v := range o.Versions {
				dv, err := releaseKernel(ctx, o, v, d)
				if err != nil {
					return fmt.Errorf("release %s: %w", v.Name, err)
				}
				r.KernelVersions[v.Name] = KernelVersion(dv.kabi, v.Name)
				r.KernelABIs[v.Name] = dv.kabi
				if err := writeRelease(ctx, o, dv, v, filepath.Join(r.Mirror, v.Name), work); err != nil {
					return fmt.Errorf("release %s: %w", v.Name, err)
				}
			}
			return nil
		}},
		{"system", func() error { return installSystem(ctx, o, r, work) }},
		{"mirror-disk", func() error { return mkfs(ctx, r.Mirror, r.MirrorImage, "SLIPWAY_MIRROR", 0) }},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(); err != nil {
			return r, fmt.Errorf("image %s: %w", s.name, err)
		}
		r.Steps[s.name] = time.Since(start)
		slog.Info("image step done", "step", s.name, "took", time.Since(start).Round(time.Millisecond))
	}
	return r, os.RemoveAll(work)
}

// releaseKernel is the unpacked kernel of release v: its own package, or
// the image's (def).
func releaseKernel(ctx context.Context, o Options, v Version, def *debian) (*debian, error) {
	if v.KernelPackage == "" || v.KernelPackage == o.KernelPackage {
		return def, nil
	}
	return fetchDebian(ctx, o.Cache, v.KernelPackage)
}

func (o *Options) defaults() error {
	if o.Out == "" || o.Cache == "" || o.Slipway == "" || o.Overlay == "" || len(o.Versions) == 0 {
		return fmt.Errorf("image build needs Out, Cache, Slipway, Overlay and Versions")
	}
	if o.Install == "" {
		o.Install = o.Versions[0].Name
	}
	if o.DiskMiB == 0 {
		o.DiskMiB = 1024
	}
	for _, tool := range []string{"mksquashfs", "mke2fs", "apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("image build needs %s: run scripts/deps", tool)
		}
	}
	return nil
}

func clean(out string, dirs ...string) error {
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("clean %s: %w", d, err)
		}
	}
	for _, d := range append([]string{filepath.Join(out, "boot")}, dirs...) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	return nil
}

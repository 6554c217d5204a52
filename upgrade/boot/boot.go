// Package boot is slipway's boot chain. Loader runs as the /init of a fixed
// stage-0 initramfs: it loads the modules needed to reach the state disk,
// mounts it, applies the try-once rule of package bootstate to the system
// directory's `current` and `previous` links, then kexecs the kernel and
// initrd of the chosen kernel version with a command line naming the chosen
// rootfs and kernel. Confirm runs in the booted system once it is up and
// marks the running versions confirmed.
package boot

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"slipway.dev/slipway/upgrade/bootstate"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/release"
)

// Kernel command-line keys the loader passes to the next kernel.
const (
	ArgRootfs = "slipway.rootfs" // rootfs version chosen (k3os/<v>)
	ArgKernel = "slipway.kernel" // kernel version chosen (kernel/<v>)
	ArgAction = "slipway.boot"   // bootstate.Action of this boot
	ArgState  = "slipway.state"  // block device holding the system directory
)

// Vmlinuz is the kernel image's name inside a version's kernel.squashfs.
const Vmlinuz = "vmlinuz"

// Options configure the loader.
type Options struct {
	// SystemDir is an already mounted system directory. When empty, Device
	// is mounted at MountPoint and SystemSubdir inside it is used.
	SystemDir    string
	Device       string // e.g. /dev/vda
	FSType       string // e.g. ext4
	MountPoint   string
	SystemSubdir string // e.g. k3os/system
	// ModulesDir holds kernel modules (*.ko) loaded in the order its
	// load.order file lists, before the device is looked for.
	ModulesDir    string
	DeviceTimeout time.Duration
	MaxAttempts   int
	// Cmdline is the base command line of the next kernel; slipway.* keys
	// are dropped from it and the chosen versions appended.
	Cmdline string
	// DryRun decides and reports without changing anything.
	DryRun bool
	// NoKexec applies the decision (state, links) but does not load or
	// start the kernel.
	NoKexec bool
	Out     io.Writer // console report
	Now     func() time.Time
}

// Plan is what the loader decided and will boot.
type Plan struct {
	bootstate.Decision
	SystemDir string
	Kernel    string // path of kernel/<v>/kernel.squashfs
	Initrd    string // path of kernel/<v>/initrd
	Cmdline   string
}

// Loader runs stage 0. On success with kexec it does not return.
func Loader(ctx context.Context, o Options) (*Plan, error) {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	mounted := false
	if o.SystemDir == "" {
		dir, err := mountState(ctx, o)
		if err != nil {
			return nil, err
		}
		o.SystemDir, mounted = dir, true
	}
	if o.Cmdline == "" { // read after mountState: as PID 1 it mounts /proc
		b, _ := os.ReadFile("/proc/cmdline")
		o.Cmdline = string(b)
	}
	if !o.DryRun {
		if err := finishSwap(o); err != nil {
			return nil, err
		}
	}
	p, err := Decide(o)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Out, "slipway boot: %s %s (%s)\n", p.Action, p.Boot, p.Reason)
	if o.DryRun {
		return p, nil
	}
	if err := Apply(o.SystemDir, p); err != nil {
		return nil, err
	}
	if o.NoKexec {
		return p, nil
	}
	return p, kexec(o, p, mounted)
}

// finishSwap completes a swap a power loss cut short between two links
// (layout.FinishSwap), so that the links name one release before the
// try-once rule reads them: the new one, whose every file was synced
// before the swap began; it is then tried like any new version.
func finishSwap(o Options) error {
	done, err := layout.New(o.SystemDir).FinishSwap()
	if err != nil {
		return err
	}
	if done {
		fmt.Fprintln(o.Out, "slipway boot: finished a swap cut short (the links name one release again)")
	}
	return nil
}

// Decide reads the system directory and returns the plan; it changes nothing.
func Decide(o Options) (*Plan, error) {
	l := layout.New(o.SystemDir)
	var cur, prev bootstate.Versions
	var err error
	for _, x := range []struct {
		c   layout.Component
		dst *string
		get func(layout.Component) (string, error)
	}{{layout.Rootfs, &cur.Rootfs, l.Current}, {layout.Kernel, &cur.Kernel, l.Current},
		{layout.Rootfs, &prev.Rootfs, l.Previous}, {layout.Kernel, &prev.Kernel, l.Previous}} {
		if *x.dst, err = x.get(x.c); err != nil {
			return nil, fmt.Errorf("read the boot links: %w", err)
		}
	}
	if cur.Rootfs == "" || cur.Kernel == "" {
		return nil, fmt.Errorf("%s has no k3os/current or kernel/current link: install a version first (slipway ops upgrade)", o.SystemDir)
	}
	st, err := bootstate.Load(o.SystemDir)
	if err != nil {
		return nil, err
	}
	d := bootstate.Decide(bootstate.Input{
		State: st, Current: cur, Previous: prev, MaxAttempts: o.MaxAttempts, Now: o.Now().UTC(),
		Present: func(rootfs bool, v string) bool {
			c := layout.Kernel
			if rootfs {
				c = layout.Rootfs
			}
			_, err := os.Stat(l.VersionDir(c, v))
			return err == nil
		},
	})
	kdir := l.VersionDir(layout.Kernel, d.Boot.Kernel)
	return &Plan{
		Decision: d, SystemDir: o.SystemDir,
		Kernel:  filepath.Join(kdir, release.KernelFile),
		Initrd:  filepath.Join(kdir, release.InitrdFile),
		Cmdline: NextCmdline(o.Cmdline, d.Boot, d.Action, o.Device),
	}, nil
}

// Apply saves the new boot record and, on a fallback, points `current` at
// the fallback versions and `previous` at the abandoned ones.
func Apply(systemDir string, p *Plan) error {
	if p.Relink {
		l := layout.New(systemDir)
		a, _ := p.State.LastAbandoned()
		var changes []layout.LinkChange
		for _, x := range []struct {
			c        layout.Component
			to, from string
		}{{layout.Rootfs, p.Boot.Rootfs, a.Rootfs}, {layout.Kernel, p.Boot.Kernel, a.Kernel}} {
			if x.to != x.from {
				changes = append(changes, layout.LinkChange{Component: x.c, Link: layout.CurrentLink, Version: x.to},
					layout.LinkChange{Component: x.c, Link: layout.PreviousLink, Version: x.from})
			}
		}
		if err := l.SetLinks(changes, nil); err != nil {
			return fmt.Errorf("fall back to %s, %s as previous: %w", p.Boot, a.Versions, err)
		}
		slog.Warn("fell back", "abandoned", a.Versions.String(), "booting", p.Boot.String(), "reason", a.Reason)
	}
	return bootstate.Save(systemDir, p.State)
}

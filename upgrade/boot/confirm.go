package boot

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"slipway.dev/slipway/upgrade/bootstate"
	"slipway.dev/slipway/upgrade/layout"
)

// ConfirmOptions configure Confirm.
type ConfirmOptions struct {
	SystemDir string
	// Running names the versions that booted; empty fields are read from
	// Cmdline (slipway.rootfs, slipway.kernel) and then from the `current`
	// links.
	Running bootstate.Versions
	Cmdline string
	Now     func() time.Time
}

// Confirm marks the running versions as confirmed: the loader will no longer
// count their boots or fall back from them.
func Confirm(o ConfirmOptions) (bootstate.State, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	run, err := running(o)
	if err != nil {
		return bootstate.State{}, err
	}
	st, err := bootstate.Load(o.SystemDir)
	if err != nil {
		return st, err
	}
	st = bootstate.Confirm(st, run, o.Now().UTC())
	if err := bootstate.Save(o.SystemDir, st); err != nil {
		return st, err
	}
	slog.Info("boot confirmed", "rootfs", run.Rootfs, "kernel", run.Kernel)
	return st, nil
}

func running(o ConfirmOptions) (bootstate.Versions, error) {
	v := o.Running
	if v.Rootfs == "" {
		v.Rootfs = CmdlineValue(o.Cmdline, ArgRootfs)
	}
	if v.Kernel == "" {
		v.Kernel = CmdlineValue(o.Cmdline, ArgKernel)
	}
	l := layout.New(o.SystemDir)
	var err error
	if v.Rootfs == "" {
		if v.Rootfs, err = l.Current(layout.Rootfs); err != nil {
			return v, err
		}
	}
	if v.Kernel == "" {
		if v.Kernel, err = l.Current(layout.Kernel); err != nil {
			return v, err
		}
	}
	if v.Rootfs == "" || v.Kernel == "" {
		return v, fmt.Errorf("cannot tell which versions run (%s): pass --rootfs and --kernel", v)
	}
	if _, err := os.Stat(o.SystemDir); err != nil {
		return v, fmt.Errorf("system directory: %w (pass --system-dir)", err)
	}
	return v, nil
}

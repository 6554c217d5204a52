//go:build linux

package boot

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// EarlyMounts mounts /proc, /sys and /dev when this process is the initramfs
// init and they are missing.
func EarlyMounts() error {
	for _, m := range []struct{ src, dst, fs string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"}, {"tmpfs", "/run", "tmpfs"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return fmt.Errorf("early mount %s: %w", m.dst, err)
		}
		if err := unix.Mount(m.src, m.dst, m.fs, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("early mount %s: %w", m.dst, err)
		}
	}
	return nil
}

// LoadModules loads the modules dir/load.order lists, in order; built-in or
// already loaded modules are skipped.
func LoadModules(dir string) error {
	f, err := os.Open(filepath.Join(dir, "load.order"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read module list: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name := strings.TrimSpace(sc.Text())
		if name == "" || strings.HasPrefix(name, "#") {
			continue
		}
		if err := loadModule(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return sc.Err()
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("load module: %w", err)
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load module %s: %w (is it built for this kernel?)", filepath.Base(path), err)
	}
	slog.Debug("module loaded", "module", filepath.Base(path))
	return nil
}

// WaitForFile returns once path exists, watching its folder, or fails after
// timeout.
func WaitForFile(ctx context.Context, path string, timeout time.Duration) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch for %s: %w", path, err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		return fmt.Errorf("watch for %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not appear within %s: check the disk is attached and its driver module listed: %w", path, timeout, ctx.Err())
		case <-w.Events:
		case err := <-w.Errors:
			return fmt.Errorf("watch for %s: %w", path, err)
		}
	}
}

// mountState prepares the initramfs and mounts the state device; it returns
// the system directory.
func mountState(ctx context.Context, o Options) (string, error) {
	if os.Getpid() == 1 {
		if err := EarlyMounts(); err != nil {
			return "", err
		}
	}
	if err := LoadModules(o.ModulesDir); err != nil {
		return "", err
	}
	if o.Device == "" {
		return "", errors.New("no state device: pass --device or --system-dir")
	}
	if err := WaitForFile(ctx, o.Device, o.DeviceTimeout); err != nil {
		return "", err
	}
	if err := os.MkdirAll(o.MountPoint, 0o755); err != nil {
		return "", fmt.Errorf("mount state: %w", err)
	}
	if err := unix.Mount(o.Device, o.MountPoint, o.FSType, 0, ""); err != nil {
		return "", fmt.Errorf("mount %s (%s) on %s: %w", o.Device, o.FSType, o.MountPoint, err)
	}
	return filepath.Join(o.MountPoint, o.SystemSubdir), nil
}

// kexec loads the plan's kernel from its squashfs and its initrd, unmounts
// the state, and starts the kernel.
func kexec(o Options, p *Plan, mounted bool) error {
	mnt := filepath.Join(os.TempDir(), "slipway-kernel")
	detach, err := mountSquashfs(p.Kernel, mnt)
	if err != nil {
		return err
	}
	kf, err := os.Open(filepath.Join(mnt, Vmlinuz))
	if err != nil {
		detach()
		return fmt.Errorf("kernel %s: %w (a kernel.squashfs holds vmlinuz at its top)", p.Boot.Kernel, err)
	}
	rf, err := os.Open(p.Initrd)
	if err != nil {
		kf.Close()
		detach()
		return fmt.Errorf("initrd of kernel %s: %w", p.Boot.Kernel, err)
	}
	err = unix.KexecFileLoad(int(kf.Fd()), int(rf.Fd()), p.Cmdline, 0)
	kf.Close()
	rf.Close()
	detach()
	if err != nil {
		return fmt.Errorf("kexec_file_load kernel %s: %w (needs CONFIG_KEXEC_FILE and an unsigned-kernel policy)", p.Boot.Kernel, err)
	}
	unix.Sync()
	if mounted {
		if err := unix.Unmount(o.MountPoint, 0); err != nil {
			slog.Warn("unmount state before kexec", "err", err)
		}
	}
	fmt.Fprintf(o.Out, "slipway boot: starting kernel %s: %s\n", p.Boot.Kernel, p.Cmdline)
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_KEXEC); err != nil {
		return fmt.Errorf("reboot into kernel %s: %w", p.Boot.Kernel, err)
	}
	return nil
}

// mountSquashfs attaches file to a free loop device read-only and mounts it
// at dir; detach unmounts it and frees the device.
func mountSquashfs(file, dir string) (detach func(), err error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open loop control: %w (load the loop module)", err)
	}
	n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
	ctl.Close()
	if err != nil {
		return nil, fmt.Errorf("get a free loop device: %w", err)
	}
	dev := fmt.Sprintf("/dev/loop%d", n)
	lf, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dev, err)
	}
	defer lf.Close()
	bf, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", file, err)
	}
	defer bf.Close()
	cfg := unix.LoopConfig{Fd: uint32(bf.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_READ_ONLY | unix.LO_FLAGS_AUTOCLEAR
	if err := unix.IoctlLoopConfigure(int(lf.Fd()), &cfg); err != nil {
		return nil, fmt.Errorf("attach %s to %s: %w", file, dev, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("mount %s: %w", file, err)
	}
	if err := unix.Mount(dev, dir, "squashfs", unix.MS_RDONLY, ""); err != nil {
		return nil, fmt.Errorf("mount %s (squashfs) on %s: %w (load the squashfs module)", file, dir, err)
	}
	return func() { _ = unix.Unmount(dir, 0) }, nil
}

// Rescue reports a failed boot on the console and replaces this process with
// shell, so that the machine stays inspectable instead of panicking. It only
// returns when shell cannot be started.
func Rescue(shell string, cause error) error {
	fmt.Fprintf(os.Stderr, "slipway boot failed: %v\nstarting rescue shell %s\n", cause, shell)
	if err := unix.Exec(shell, []string{shell}, os.Environ()); err != nil {
		return fmt.Errorf("%w (and no rescue shell: %v)", cause, err)
	}
	return cause
}

package main

import (
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"slipway.dev/slipway/upgrade/boot"
	"slipway.dev/slipway/upgrade/bootstate"
)

// bootCommands returns the boot chain: the stage-0 loader and the
// confirmation of a healthy boot.
func bootCommands() []*cli.Command {
	return []*cli.Command{bootCommand(), confirmCommand()}
}

func bootCommand() *cli.Command {
	env := func(s string) []string { return []string{"SLIPWAY_BOOT_" + s} }
	return &cli.Command{
		Name:  "boot",
		Usage: "stage-0 loader: pick the kernel and rootfs `current` names (try-once rule) and kexec into them",
		Description: "Runs as /init of the fixed boot initramfs. Flags may also come from the kernel command line\n" +
			"as SLIPWAY_BOOT_* variables (the kernel passes NAME=value words to init as environment).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "system-dir", Usage: "an already mounted system directory (skips mounting --device)", EnvVars: env("SYSTEM_DIR")},
			&cli.StringFlag{Name: "device", Value: "/dev/vda", Usage: "block device holding the system directory", EnvVars: env("DEVICE")},
			&cli.StringFlag{Name: "fstype", Value: "ext4", Usage: "file system of --device", EnvVars: env("FSTYPE")},
			&cli.StringFlag{Name: "mount-point", Value: "/run/slipway/state", Usage: "where --device is mounted", EnvVars: env("MOUNT_POINT")},
			&cli.StringFlag{Name: "system-subdir", Value: "k3os/system", Usage: "system directory inside --device", EnvVars: env("SYSTEM_SUBDIR")},
			&cli.StringFlag{Name: "modules-dir", Value: "/lib/modules/slipway-boot", Usage: "kernel modules to load first, in the order of its load.order", EnvVars: env("MODULES_DIR")},
			&cli.DurationFlag{Name: "device-timeout", Value: 30 * time.Second, Usage: "how long to wait for --device", EnvVars: env("DEVICE_TIMEOUT")},
			&cli.IntFlag{Name: "max-attempts", Value: bootstate.DefaultMaxAttempts, Usage: "boots a tentative version gets before falling back", EnvVars: env("MAX_ATTEMPTS")},
			&cli.StringFlag{Name: "cmdline", Usage: "base command line of the next kernel (default: this kernel's)", EnvVars: env("CMDLINE")},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the decision, change nothing", EnvVars: env("DRY_RUN")},
			&cli.BoolFlag{Name: "no-kexec", Usage: "apply the decision but do not start the kernel", EnvVars: env("NO_KEXEC")},
			&cli.StringFlag{Name: "rescue-shell", Value: "/bin/sh", Usage: "shell started when the loader fails as PID 1", EnvVars: env("RESCUE_SHELL")},
		},
		Action: func(c *cli.Context) error {
			o := boot.Options{
				SystemDir: c.String("system-dir"), Device: c.String("device"), FSType: c.String("fstype"),
				MountPoint: c.String("mount-point"), SystemSubdir: c.String("system-subdir"),
				ModulesDir: c.String("modules-dir"), DeviceTimeout: c.Duration("device-timeout"),
				MaxAttempts: c.Int("max-attempts"), Cmdline: c.String("cmdline"),
				DryRun: c.Bool("dry-run"), NoKexec: c.Bool("no-kexec"), Out: os.Stdout,
			}
			_, err := boot.Loader(c.Context, o)
			if err != nil && os.Getpid() == 1 {
				return boot.Rescue(c.String("rescue-shell"), err)
			}
			return err
		},
	}
}

func confirmCommand() *cli.Command {
	return &cli.Command{
		Name:  "confirm",
		Usage: "mark the running rootfs and kernel as good: the boot loader stops counting their attempts",
		Flags: []cli.Flag{
			systemDirFlag(),
			&cli.StringFlag{Name: "rootfs", Usage: "running rootfs version (default: slipway.rootfs on /proc/cmdline, else current)", EnvVars: []string{"SLIPWAY_ROOTFS_VERSION"}},
			&cli.StringFlag{Name: "kernel", Usage: "running kernel version (default: slipway.kernel on /proc/cmdline, else current)", EnvVars: []string{"SLIPWAY_KERNEL_VERSION"}},
		},
		Action: func(c *cli.Context) error {
			st, err := boot.Confirm(boot.ConfirmOptions{
				SystemDir: c.String("system-dir"),
				Running:   bootstate.Versions{Rootfs: c.String("rootfs"), Kernel: c.String("kernel")},
				Cmdline:   procCmdline(),
			})
			if err != nil {
				return err
			}
			_, err = c.App.Writer.Write([]byte(st.Summary() + "\n"))
			return err
		},
	}
}

// procCmdline is this kernel's command line, "" when unreadable.
func procCmdline() string {
	b, _ := os.ReadFile("/proc/cmdline")
	return strings.TrimSpace(string(b))
}

// Package reboot restarts the machine after a delay, the way the host's
// init expects (told from its PID 1): by the signal systemd, busybox init or
// openrc-init reboot on (or, opted in, through systemd-logind over the
// system D-Bus, which honours inhibitor locks), by a
// runlevel 6 request to sysvinit, through reboot(2) after sync(2), or
// through an external command. The delay is cancelled cleanly by its
// context (SIGINT/SIGTERM).
package reboot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"
)

// Rebooter restarts the machine.
type Rebooter interface {
	Reboot(ctx context.Context) error
	String() string
}

// Syscall syncs the filesystems and calls reboot(2) directly: no service is
// stopped cleanly, as with `reboot -f`.
type Syscall struct{}

func (Syscall) String() string { return "reboot(2)" }

// Reboot syncs and restarts the machine.
func (Syscall) Reboot(ctx context.Context) error {
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART); err != nil {
		return fmt.Errorf("reboot(2): %w (needs CAP_SYS_BOOT in the host's namespaces)", err)
	}
	return nil
}

// Command runs an external command, e.g. ["systemctl", "reboot"].
type Command struct{ Argv []string }

func (c Command) String() string { return fmt.Sprintf("command %q", c.Argv) }

// Reboot runs the command and waits for it.
func (c Command) Reboot(ctx context.Context) error {
	if len(c.Argv) == 0 {
		return errors.New("empty reboot command")
	}
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("reboot command %q: %w", c.Argv, err)
	}
	return nil
}

// Auto reboots the way the host's init expects, for a process that runs on
// the host (its /proc/1 is the host's init, its /run the host's).
func Auto() Rebooter { return AutoAt("/proc", "/run") }

// After waits delay, then reboots with r. A cancelled ctx stops the wait
// and returns ctx's error without rebooting.
func After(ctx context.Context, delay time.Duration, r Rebooter) error {
	if delay > 0 {
		slog.Info("rebooting after a delay; interrupt to cancel", "delay", delay, "via", r.String())
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return fmt.Errorf("reboot cancelled: %w (the new version is installed; it starts at the next boot)", ctx.Err())
		case <-t.C:
		}
	}
	slog.Info("rebooting", "via", r.String())
	return r.Reboot(ctx)
}

package reboot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// Init is the init system a host runs, as its /run shows it.
type Init string

// The init systems the reboot methods know.
const (
	InitSystemd Init = "systemd" // /run/systemd/system exists (sd_booted)
	InitOpenRC  Init = "openrc"  // /run/openrc exists (k3os, Alpine)
	InitUnknown Init = "unknown"
)

// DetectInit tells the host's init system from runDir, the host's /run (in
// the agent's pod: a read-only hostPath mount of it; on the host: /run).
// The container's own /run says nothing about the host.
func DetectInit(runDir string) Init {
	if isDir(filepath.Join(runDir, "systemd", "system")) {
		return InitSystemd
	}
	if isDir(filepath.Join(runDir, "openrc")) {
		return InitOpenRC
	}
	return InitUnknown
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// ForInit is the reboot the host's init expects: logind on systemd; on
// OpenRC the host's own openrc-shutdown (or reboot), run in the host's root
// (hostRoot, e.g. /proc/1/root from a pod with the host's PID namespace;
// "/" on the host), so that k3s and containerd are stopped by their
// services; reboot(2) after sync when the init is unknown.
func ForInit(init Init, hostRoot string) Rebooter {
	switch init {
	case InitSystemd:
		return Logind{}
	case InitOpenRC:
		for _, argv := range [][]string{{"/sbin/openrc-shutdown", "-r", "now"}, {"/sbin/reboot"}, {"/bin/busybox", "reboot"}} {
			if _, err := os.Stat(filepath.Join(hostRoot, argv[0])); err == nil {
				return HostCommand{Root: hostRoot, Argv: argv}
			}
		}
		return HostCommand{Root: hostRoot, Argv: []string{"/sbin/reboot"}}
	}
	return Syscall{}
}

// AutoAt is Auto for an agent that sees the host's /run at runDir and its
// root at hostRoot.
func AutoAt(runDir, hostRoot string) Rebooter { return ForInit(DetectInit(runDir), hostRoot) }

// HostCommand runs a command of the host's own, chrooted into Root (the
// host's root: its binaries, its libraries, its /run, where OpenRC's
// control files are); with the host's PID namespace it signals the host's
// init. Root "" or "/" runs it as it is.
type HostCommand struct {
	Root string
	Argv []string
}

func (c HostCommand) String() string {
	if c.Root == "" || c.Root == "/" {
		return fmt.Sprintf("command %q", c.Argv)
	}
	return fmt.Sprintf("host command %q (in %s)", c.Argv, c.Root)
}

// Reboot runs the command and waits for it.
func (c HostCommand) Reboot(ctx context.Context) error {
	if len(c.Argv) == 0 {
		return errors.New("empty reboot command")
	}
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	if c.Root != "" && c.Root != "/" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: c.Root}
		cmd.Dir = "/"
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("reboot with %s: %w", c, err)
	}
	return nil
}

package platform

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"slipway.dev/slipway/upgrade/reboot"
)

// The host's init is told from its PID 1 alone (no host /run: the
// manifest mounts none), and systemd is rebooted with a signal to PID 1,
// not over the system bus.
func TestRebooterFromPID1(t *testing.T) {
	for _, c := range []struct {
		method, comm string
		fifo         bool // the host's /run has openrc-init's FIFO
		want         reboot.Rebooter
	}{
		{"auto", "systemd", false, reboot.SignalInit{Init: reboot.InitSystemd, Signal: SystemdReboot}},
		{"auto", "init", false, reboot.SignalInit{Init: reboot.InitBusybox, Signal: syscall.SIGTERM}},
		{"auto", "busybox", false, reboot.SignalInit{Init: reboot.InitBusybox, Signal: syscall.SIGTERM}},
		{"auto", "init", true, reboot.SignalInit{Init: reboot.InitOpenRCInit, Signal: syscall.SIGINT}},
		{"auto", "runit", false, reboot.Syscall{}},
		{"systemd", "init", false, reboot.SignalInit{Init: reboot.InitSystemd, Signal: SystemdReboot}},
		{"logind", "systemd", false, reboot.Logind{}},
		{"openrc", "init", false, reboot.SignalInit{Init: reboot.InitBusybox, Signal: syscall.SIGTERM}},
	} {
		proc, run := t.TempDir(), t.TempDir()
		if err := os.MkdirAll(filepath.Join(proc, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, "1", "comm"), []byte(c.comm+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if c.fifo {
			if err := os.MkdirAll(filepath.Join(run, "openrc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(filepath.Join(run, "openrc", "init.ctl"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		got, err := Rebooter(c.method, "", proc, run)
		if err != nil || got != c.want {
			t.Errorf("%s with PID 1 %q (FIFO %v): %v, %v; want %v", c.method, c.comm, c.fifo, got, err, c.want)
		}
	}
	if _, err := Rebooter("command", " ", "/proc", "/run"); err == nil {
		t.Errorf("--reboot-method=command without a command accepted")
	}
	if _, err := Rebooter("dbus", "", "/proc", "/run"); err == nil {
		t.Errorf("an unknown method accepted")
	}
}

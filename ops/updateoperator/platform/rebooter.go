package platform

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"slipway.dev/slipway/upgrade/reboot"
)

// SystemdReboot is the signal systemd(1) documents as starting
// reboot.target: SIGRTMIN+5, with glibc's SIGRTMIN (34), as systemd is
// built. It needs no system bus: the agent's pod mounts no host socket.
// Unlike `systemctl reboot` through logind it takes no inhibitor lock
// into account: by reboot-update the controller has drained the node
// (and the kubelet's own delay lock only bounds a graceful shutdown that
// the drain did already).
const SystemdReboot = syscall.Signal(34 + 5)

// RebootMethods are the values of the agent's --reboot-method.
const RebootMethods = "auto, systemd, logind, openrc, busybox, openrc-init, sysvinit, syscall or command"

// Rebooter is the slipway platform's reboot for --reboot-method: auto
// tells the host's init from its PID 1 (procDir: the host's PID
// namespace's /proc, which a hostPID pod has) and, when the host's /run
// is seen at runDir (on the host itself; the manifest mounts none), from
// the control FIFOs there; an init seen only as "init" with nothing to
// tell it by is busybox init, as on k3os. systemd is rebooted with
// SystemdReboot to PID 1, never through the system bus (logind only when
// asked for by name, with the bus mounted by the admin).
func Rebooter(method, command, procDir, runDir string) (reboot.Rebooter, error) {
	initctl := filepath.Join(runDir, "initctl")
	forInit := func(i reboot.Init) reboot.Rebooter {
		if i == reboot.InitSystemd {
			return reboot.SignalInit{Init: reboot.InitSystemd, Signal: SystemdReboot}
		}
		return reboot.ForInit(i, initctl)
	}
	switch method {
	case "auto", "":
		return forInit(reboot.Detect(reboot.ReadPID1(procDir, runDir))), nil
	case "systemd":
		return forInit(reboot.InitSystemd), nil
	case "logind":
		return reboot.Logind{}, nil
	case "openrc": // OpenRC as service manager under busybox init (k3os), or openrc-init
		if reboot.Detect(reboot.ReadPID1(procDir, runDir)) == reboot.InitOpenRCInit {
			return forInit(reboot.InitOpenRCInit), nil
		}
		return forInit(reboot.InitBusybox), nil
	case "busybox":
		return forInit(reboot.InitBusybox), nil
	case "openrc-init":
		return forInit(reboot.InitOpenRCInit), nil
	case "sysvinit":
		return forInit(reboot.InitSysV), nil
	case "syscall":
		return reboot.Syscall{}, nil
	case "command":
		if strings.TrimSpace(command) == "" {
			return nil, fmt.Errorf("--reboot-method=command needs --reboot-command")
		}
		return reboot.Command{Argv: strings.Fields(command)}, nil
	}
	return nil, fmt.Errorf("--reboot-method %q is not %s", method, RebootMethods)
}

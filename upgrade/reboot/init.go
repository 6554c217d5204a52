package reboot

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Init is the host's init (its PID 1), as far as a process that shares
// the host's PID namespace can tell it without ptrace.
type Init string

// The inits the reboot methods know.
const (
	// InitSystemd is systemd: SIGRTMIN+5 to PID 1 starts reboot.target
	// (systemd(1)), with no bus and no socket; Logind is the opt-in way
	// through logind, which honours inhibitor locks.
	InitSystemd Init = "systemd"
	// InitBusybox is busybox init (k3os: OpenRC as its service manager,
	// inittab's ::shutdown: runs `openrc shutdown`): SIGTERM to PID 1
	// makes it run the shutdown actions, end every process and reboot.
	InitBusybox Init = "busybox-init"
	// InitOpenRCInit is openrc-init as PID 1: SIGINT reboots (SIGTERM
	// would halt it).
	InitOpenRCInit Init = "openrc-init"
	// InitSysV is sysvinit: a runlevel 6 request on its /run/initctl FIFO,
	// as telinit 6 writes it.
	InitSysV Init = "sysvinit"
	// InitUnknown is any other init: sync, then reboot(2).
	InitUnknown Init = "unknown"
)

// PID1 is what the host's PID 1 and its /run show.
type PID1 struct {
	// Comm is /proc/1/comm: "systemd" (systemd names itself so), "init"
	// (busybox, sysvinit or openrc-init started as /sbin/init), "busybox"
	// (started as `busybox init`), "openrc-init".
	Comm string
	// Exe is the base name of /proc/1/exe's target ("busybox",
	// "openrc-init", "systemd", "init"), "" when it cannot be read: a
	// process without CAP_SYS_PTRACE cannot read it for an init that holds
	// capabilities it lacks.
	Exe string
	// In the host's /run: systemd/system (sd_booted), openrc/init.ctl
	// (openrc-init's control FIFO), initctl (sysvinit's FIFO).
	SystemdRun, OpenRCInitFIFO, InitctlFIFO bool
}

// ReadPID1 reads the host's PID 1 from procDir (the host's PID namespace's
// /proc: "/proc" on the host and in a hostPID pod) and runDir (the host's
// /run: "/run" on the host; in the agent's pod, which mounts no host /run,
// a directory that does not exist, and its control FIFOs are not seen).
func ReadPID1(procDir, runDir string) PID1 {
	var p PID1
	if b, err := os.ReadFile(filepath.Join(procDir, "1", "comm")); err == nil {
		p.Comm = strings.TrimSpace(string(b))
	}
	if t, err := os.Readlink(filepath.Join(procDir, "1", "exe")); err == nil {
		p.Exe = filepath.Base(strings.TrimSuffix(t, " (deleted)"))
	}
	p.SystemdRun = isDir(filepath.Join(runDir, "systemd", "system"))
	p.OpenRCInitFIFO = isFIFO(filepath.Join(runDir, "openrc", "init.ctl"))
	p.InitctlFIFO = isFIFO(filepath.Join(runDir, "initctl"))
	return p
}

// Detect tells the init from what PID 1 shows. Its name decides when it
// says something (systemd, openrc-init, busybox); an init seen only as
// "init" (exe unreadable, or a real binary called init) is told by the
// control FIFO it made in /run when the host's /run is seen (on the host):
// openrc-init's, sysvinit's, or none (busybox init, k3os). Without the
// host's /run (the agent's pod) an "init" is busybox init, as on every
// k3os node: a sysvinit host, or openrc-init started as /sbin/init, needs
// its --reboot-method. An init with another name (runit, s6, a
// container's tini) is unknown: reboot(2).
func Detect(p PID1) Init {
	switch {
	case p.Comm == "systemd" || p.Exe == "systemd":
		return InitSystemd
	case p.Comm == "openrc-init" || p.Exe == "openrc-init":
		return InitOpenRCInit
	case p.Exe == "busybox" || p.Comm == "busybox": // exec'd as busybox init
		return InitBusybox
	case p.Exe != "" && p.Exe != "init", p.Comm != "init":
		return InitUnknown
	case p.OpenRCInitFIFO:
		return InitOpenRCInit
	case p.InitctlFIFO:
		return InitSysV
	case p.SystemdRun:
		return InitSystemd
	}
	return InitBusybox
}

// ForInit is the reboot the host's init expects; initctl is the path of
// the host's /run/initctl as this process sees it (for sysvinit).
func ForInit(init Init, initctl string) Rebooter {
	switch init {
	case InitSystemd:
		return SignalInit{Init: init, Signal: SIGRTMIN5}
	case InitBusybox:
		return SignalInit{Init: init, Signal: syscall.SIGTERM}
	case InitOpenRCInit:
		return SignalInit{Init: init, Signal: syscall.SIGINT}
	case InitSysV:
		return Initctl{Path: initctl}
	}
	return Syscall{}
}

// AutoAt is Auto for a process that sees the host's PID namespace's /proc
// at procDir and the host's /run at runDir. A systemd host is rebooted
// through logind when this process reaches the system bus (on the host, or
// in a pod rendered with --systemd-hosts: logind honours inhibitor locks),
// else by SIGRTMIN+5 to PID 1.
func AutoAt(procDir, runDir string) Rebooter { return autoAt(procDir, runDir, reachableSystemBus()) }

// autoAt is AutoAt with the system bus's address (bus; "" when this
// process cannot reach one).
func autoAt(procDir, runDir, bus string) Rebooter {
	init := Detect(ReadPID1(procDir, runDir))
	if init == InitSystemd && bus != "" {
		return Logind{Address: bus}
	}
	return ForInit(init, filepath.Join(runDir, "initctl"))
}

// reachableSystemBus is the system bus's address when this process can reach one:
// DBUS_SYSTEM_BUS_ADDRESS, or the default socket when it is there; "" else.
func reachableSystemBus() string {
	if a := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); a != "" {
		return a
	}
	if st, err := os.Stat(strings.TrimPrefix(DefaultSystemBus, "unix:path=")); err == nil && st.Mode()&os.ModeSocket != 0 {
		return DefaultSystemBus
	}
	return ""
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func isFIFO(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode()&os.ModeNamedPipe != 0
}

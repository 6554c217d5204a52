package reboot

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"syscall"
)

// SignalInit asks the host's init to reboot with the signal it reboots on:
// SIGTERM for busybox init (it runs inittab's ::shutdown: actions, on k3os
// `openrc shutdown`, which stops k3s and containerd through their
// services, then ends every process, syncs and reboots), SIGINT for
// openrc-init, SIGRTMIN+5 for systemd (reboot.target: every unit stopped
// in order, the kubelet and containerd included). The process must share the host's PID namespace (a hostPID
// pod) and run as root: signalling a process of the same user needs no
// capability, and PID 1 receives the signals it handles.
type SignalInit struct {
	Init   Init
	Signal syscall.Signal
	// PID is the init's process ID; 0 means 1.
	PID int
}

func (s SignalInit) String() string {
	return fmt.Sprintf("%s (%s to PID %d)", s.Init, unixSignalName(s.Signal), s.pid())
}

func (s SignalInit) pid() int {
	if s.PID == 0 {
		return 1
	}
	return s.PID
}

// Reboot sends the signal; the init reboots on its own time.
func (s SignalInit) Reboot(context.Context) error {
	if err := syscall.Kill(s.pid(), s.Signal); err != nil {
		return fmt.Errorf("send %s to the host's init (PID %d): %w (the agent needs the host's PID namespace, hostPID, and to run as root)", unixSignalName(s.Signal), s.pid(), err)
	}
	return nil
}

// SIGRTMIN5 is the signal systemd reboots on: SIGRTMIN+5, which systemd(1)
// documents as starting reboot.target ("mostly equivalent to systemctl start
// reboot.target --job-mode=replace-irreversibly"). systemd is built against
// glibc, whose SIGRTMIN is 34 (the kernel's first two real-time signals are
// the C library's own): 39.
const SIGRTMIN5 = syscall.Signal(39)

func unixSignalName(s syscall.Signal) string {
	switch s {
	case SIGRTMIN5:
		return "SIGRTMIN+5"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return s.String()
}

// Initctl asks sysvinit for runlevel 6 (reboot) over its control FIFO, the
// request telinit 6 writes: init then runs the rc scripts' kill side.
type Initctl struct {
	// Path of the host's /run/initctl as this process sees it.
	Path string
}

func (i Initctl) String() string { return fmt.Sprintf("sysvinit (runlevel 6 on %s)", i.Path) }

// initctl request layout (sysvinit's initreq.h): magic, command, runlevel,
// sleep time, then 368 bytes of request data; 384 bytes in all.
const (
	initctlMagic     = 0x03091969
	initctlCmdRunlvl = 1
	initctlSize      = 384
	initctlSleep     = 5 // seconds between SIGTERM and SIGKILL to processes
)

// initctlRequest is the runlevel request for level.
func initctlRequest(level byte) []byte {
	b := make([]byte, initctlSize)
	binary.NativeEndian.PutUint32(b[0:], initctlMagic)
	binary.NativeEndian.PutUint32(b[4:], initctlCmdRunlvl)
	binary.NativeEndian.PutUint32(b[8:], uint32(level))
	binary.NativeEndian.PutUint32(b[12:], initctlSleep)
	return b
}

// Reboot writes the request. The FIFO may sit on a read-only mount: writing
// a FIFO changes nothing on the filesystem.
func (i Initctl) Reboot(context.Context) error {
	f, err := os.OpenFile(i.Path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("open sysvinit's control FIFO: %w (is the host's /run mounted, and sysvinit PID 1?)", err)
	}
	defer f.Close()
	if _, err := f.Write(initctlRequest('6')); err != nil {
		return fmt.Errorf("ask sysvinit for runlevel 6 through %s: %w", i.Path, err)
	}
	return nil
}

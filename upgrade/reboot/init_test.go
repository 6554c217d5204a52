package reboot

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		name string
		p    PID1
		want Init
	}{
		{"systemd names itself", PID1{Comm: "systemd"}, InitSystemd},
		{"systemd seen by its exe", PID1{Comm: "init", Exe: "systemd", SystemdRun: true}, InitSystemd},
		{"k3os: busybox init, OpenRC's /run/openrc, exe unreadable", PID1{Comm: "init"}, InitBusybox},
		{"busybox init seen by its exe", PID1{Comm: "init", Exe: "busybox"}, InitBusybox},
		{"started as `busybox init`", PID1{Comm: "busybox"}, InitBusybox},
		{"openrc-init by name", PID1{Comm: "openrc-init"}, InitOpenRCInit},
		{"openrc-init started as /sbin/init: its control FIFO", PID1{Comm: "init", OpenRCInitFIFO: true}, InitOpenRCInit},
		{"openrc-init by exe wins over the name init", PID1{Comm: "init", Exe: "openrc-init"}, InitOpenRCInit},
		{"sysvinit: its initctl FIFO", PID1{Comm: "init", Exe: "init", InitctlFIFO: true}, InitSysV},
		{"sysvinit, exe unreadable", PID1{Comm: "init", InitctlFIFO: true}, InitSysV},
		{"runit is not signalled", PID1{Comm: "runit", Exe: "runit"}, InitUnknown},
		{"a container's tini is not signalled", PID1{Comm: "tini", OpenRCInitFIFO: true}, InitUnknown},
		{"an init binary of another name", PID1{Comm: "init", Exe: "s6-svscan"}, InitUnknown},
		{"nothing readable", PID1{}, InitUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Detect(c.p); got != c.want {
				t.Errorf("Detect(%+v) = %s, want %s", c.p, got, c.want)
			}
		})
	}
}

// host writes a fake host: /proc/1/comm, /proc/1/exe (a link, when exe is
// set) and paths under /run ("name|" makes a FIFO, "name/" a directory).
func host(t *testing.T, comm, exe string, run ...string) (proc, runDir string) {
	t.Helper()
	proc, runDir = t.TempDir(), t.TempDir()
	must(t, os.MkdirAll(filepath.Join(proc, "1"), 0o755))
	must(t, os.WriteFile(filepath.Join(proc, "1", "comm"), []byte(comm+"\n"), 0o644))
	if exe != "" {
		must(t, os.Symlink(exe, filepath.Join(proc, "1", "exe")))
	}
	for _, r := range run {
		p := filepath.Join(runDir, strings.TrimRight(r, "|/"))
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		if strings.HasSuffix(r, "|") {
			must(t, syscall.Mkfifo(p, 0o600))
		} else {
			must(t, os.MkdirAll(p, 0o755))
		}
	}
	return proc, runDir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestAutoAt: the rebooter auto chooses for each host. A k3os host (busybox
// init as PID 1, OpenRC only as its service manager: /run/openrc exists,
// no openrc-init FIFO) is rebooted by SIGTERM to PID 1, never by
// openrc-shutdown, which only talks to openrc-init.
func TestAutoAt(t *testing.T) {
	for _, c := range []struct {
		name      string
		comm, exe string
		run       []string
		want      string
	}{
		{"k3os", "init", "", []string{"openrc/started/", "k3os/"}, "busybox-init (SIGTERM to PID 1)"},
		{"k3os seen from the host", "init", "/bin/busybox", []string{"openrc/"}, "busybox-init (SIGTERM to PID 1)"},
		{"openrc-init", "init", "", []string{"openrc/init.ctl|"}, "openrc-init (SIGINT to PID 1)"},
		{"a directory called init.ctl is no FIFO", "init", "", []string{"openrc/init.ctl/"}, "busybox-init"},
		{"systemd", "systemd", "", []string{"systemd/system/", "dbus/"}, "systemd (SIGRTMIN+5 to PID 1)"},
		{"sysvinit", "init", "/sbin/init", []string{"initctl|"}, "sysvinit (runlevel 6 on "},
		{"unknown", "runit", "", nil, "reboot(2)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			proc, run := host(t, c.comm, c.exe, c.run...)
			if got := autoAt(proc, run, "").String(); !strings.Contains(got, c.want) {
				t.Errorf("AutoAt = %s, want %s", got, c.want)
			}
		})
	}
}

// TestAutoAtWithoutHostRun: the agent's pod mounts no host /run (a
// read-only bind mount does not stop connect(2) to the host's sockets), so
// the init is told from /proc/1 alone: systemd is signalled, not called
// over the system bus, and k3os's busybox init (seen as "init") is still
// told apart from an unknown init.
func TestAutoAtWithoutHostRun(t *testing.T) {
	for _, c := range []struct {
		name, comm, want string
	}{
		{"systemd", "systemd", "systemd (SIGRTMIN+5 to PID 1)"},
		{"k3os", "init", "busybox-init (SIGTERM to PID 1)"},
		{"busybox init", "busybox", "busybox-init (SIGTERM to PID 1)"},
		{"openrc-init", "openrc-init", "openrc-init (SIGINT to PID 1)"},
		{"unknown", "runit", "reboot(2)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			proc, _ := host(t, c.comm, "")
			if got := autoAt(proc, filepath.Join(t.TempDir(), "not-mounted"), "").String(); got != c.want {
				t.Errorf("AutoAt = %s, want %s", got, c.want)
			}
		})
	}
}

// TestSignalReachesInit: the signal systemd reboots on (SIGRTMIN+5 as
// glibc numbers it, systemd(1)) is delivered to the process named as init.
func TestSignalReachesInit(t *testing.T) {
	got := make(chan os.Signal, 1)
	signal.Notify(got, SIGRTMIN5)
	defer signal.Stop(got)
	r := ForInit(InitSystemd, "")
	s, ok := r.(SignalInit)
	if !ok {
		t.Fatalf("ForInit(systemd) = %s, want a signal to PID 1", r)
	}
	s.PID = os.Getpid()
	if err := s.Reboot(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case sig := <-got:
		if sig != syscall.Signal(39) {
			t.Errorf("received %v, want signal 39 (SIGRTMIN+5)", sig)
		}
	case <-time.After(time.Minute):
		t.Fatal("SIGRTMIN+5 never arrived")
	}
}

// TestAutoAtWithTheBus: a systemd host whose system bus this process
// reaches (on the host; a pod rendered with --systemd-hosts) reboots
// through logind, which honours inhibitor locks.
func TestAutoAtWithTheBus(t *testing.T) {
	proc, run := host(t, "systemd", "", "systemd/system/")
	if got := autoAt(proc, run, "unix:path=/x/bus").String(); got != "systemd-logind (unix:path=/x/bus)" {
		t.Errorf("autoAt = %s, want logind on the bus given", got)
	}
	proc, run = host(t, "init", "")
	if got := autoAt(proc, run, "unix:path=/x/bus").String(); !strings.Contains(got, "busybox-init") {
		t.Errorf("autoAt = %s: the bus matters on systemd hosts only", got)
	}
}

// ReadPID1 reads this machine's own PID 1 without failing.
func TestReadPID1OfThisMachine(t *testing.T) {
	p := ReadPID1("/proc", "/run")
	if p.Comm == "" {
		t.Skip("no /proc/1/comm here")
	}
	t.Logf("PID 1: %+v -> %s", p, Detect(p))
}

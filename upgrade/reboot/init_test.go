package reboot

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
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
		{"systemd", "systemd", "", []string{"systemd/system/", "dbus/"}, "systemd-logind"},
		{"sysvinit", "init", "/sbin/init", []string{"initctl|"}, "sysvinit (runlevel 6 on "},
		{"unknown", "runit", "", nil, "reboot(2)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			proc, run := host(t, c.comm, c.exe, c.run...)
			if got := AutoAt(proc, run).String(); !strings.Contains(got, c.want) {
				t.Errorf("AutoAt = %s, want %s", got, c.want)
			}
		})
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

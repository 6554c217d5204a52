package upgrade_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/boot"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/release"
)

// slipwayBin is the real binary, built once by TestMain.
var slipwayBin string

func TestMain(m *testing.M) {
	withoutSlipwayEnv()
	dir, err := os.MkdirTemp("", "slipway-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	slipwayBin = filepath.Join(dir, "slipway")
	out, err := exec.Command("go", "build", "-o", slipwayBin, "slipway.dev/slipway/cmd/slipway").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build slipway: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// withoutSlipwayEnv removes every SLIPWAY_* variable from this process's
// environment, so the binaries the tests start (which inherit it) take
// only what each test gives them: a SLIPWAY_REBOOT=false exported on a
// workstation must not change what `ops upgrade` does under test.
func withoutSlipwayEnv() {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "SLIPWAY_") {
			os.Unsetenv(k)
		}
	}
}

func (e *env) cmd(args ...string) *exec.Cmd {
	base := []string{"ops", "upgrade", "--system-dir", e.sys, "--source", e.mirror, "--arch", arch, "--lock-file", e.lock, "--reboot=false"}
	return exec.Command(slipwayBin, append(base, args...)...)
}

// The steps of a v1 -> v2 upgrade of all three components, in order.
var crashSteps = []string{
	"extracting", "staged", "renamed:k3os", "renamed:kernel", "renamed:k3s",
	"previous:k3os", "current:k3os", "previous:kernel", "current:kernel", "previous:k3s", "current:k3s",
}

// Killed at each step, the system directory still has a complete version
// behind every current link, and a re-run completes the upgrade.
func TestCrashAtEveryStep(t *testing.T) {
	for _, step := range crashSteps {
		t.Run(step, func(t *testing.T) {
			e := newEnv(t)
			all := []string{"--rootfs", "--kernel", "--k3s"}
			if out, err := e.cmd(append(all, "--version", "v1")...).CombinedOutput(); err != nil {
				t.Fatalf("install v1: %v\n%s", err, out)
			}
			out, err := e.cmd(append(all, "--version", "v2", "--test-crash-at", step)...).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the run was not killed at %s: %v\n%s", step, err, out)
			}
			checkBootable(t, e.sys)
			if out, err := e.cmd(append(all, "--version", "v2")...).CombinedOutput(); err != nil {
				t.Fatalf("re-run after the crash: %v\n%s", err, out)
			}
			checkBootable(t, e.sys)
			for c, want := range map[layout.Component][2]string{
				layout.Rootfs: {"v2", "v1"}, layout.Kernel: {"5.15.0-v2", "5.15.0-v1"}, layout.K3s: {"v2-k3s1", "v1-k3s1"},
			} {
				if cur, prev := link(t, e.sys, c, "current"), link(t, e.sys, c, "previous"); cur != want[0] || prev != want[1] {
					t.Errorf("%s: current/previous = %s/%s, want %s/%s", c, cur, prev, want[0], want[1])
				}
			}
			if m, _ := filepath.Glob(filepath.Join(e.sys, ".slipway-staging-*")); len(m) != 0 {
				t.Errorf("staging folders left: %v", m)
			}
		})
	}
}

// checkBootable: every current link points at a complete version folder.
func checkBootable(t *testing.T, sys string) {
	t.Helper()
	l := layout.New(sys)
	for c, files := range map[layout.Component][]string{
		layout.Rootfs: {"k3os"}, layout.Kernel: {release.KernelFile, release.InitrdFile}, layout.K3s: {"k3s", "k3s-install.sh"},
	} {
		cur, err := l.Current(c)
		if err != nil || cur == "" {
			t.Fatalf("%s has no current link: %v", c, err)
		}
		for _, f := range append(files, upgrade.MarkerFile) {
			if _, err := os.Stat(filepath.Join(l.VersionDir(c, cur), f)); err != nil {
				t.Fatalf("%s/current -> %s is incomplete: %v", c, cur, err)
			}
		}
	}
}

// A second run while one holds the lock fails at once, exit code 3, naming
// the holder; SIGTERM cancels the holder's reboot delay cleanly.
func TestLockContentionBetweenProcesses(t *testing.T) {
	e := newEnv(t)
	mark := filepath.Join(t.TempDir(), "rebooted")
	holder := e.cmd("--version", "v1", "--reboot=true", "--reboot-delay", "1h", "--reboot-command", "touch "+mark)
	stderr, err := holder.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	waitForLine(t, stderr, "rebooting after a delay")

	before := treeDigest(t, e.sys)
	out, err := e.cmd("--version", "v2").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != upgrade.ExitLocked {
		t.Fatalf("second run: %v (want exit %d)\n%s", err, upgrade.ExitLocked, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("pid %d", holder.Process.Pid)) {
		t.Fatalf("second run does not name the holder (pid %d):\n%s", holder.Process.Pid, out)
	}
	if treeDigest(t, e.sys) != before {
		t.Fatal("the refused run changed the system directory")
	}
	rb := exec.Command(slipwayBin, "ops", "rollback", "--system-dir", e.sys, "--lock-file", e.lock, "--reboot=false")
	if err := rb.Run(); !errors.As(err, &ee) || ee.ExitCode() != upgrade.ExitLocked {
		t.Fatalf("rollback during an upgrade: %v, want exit %d", err, upgrade.ExitLocked)
	}

	if err := holder.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = bufio.NewReader(stderr).WriteTo(discard{}) }()
	err = holder.Wait()
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("holder after SIGTERM: %v; want a clean non-zero exit", err)
	}
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Fatal("rebooted although SIGTERM cancelled the delay")
	}
	if link(t, e.sys, layout.Rootfs, "current") != "v1" {
		t.Fatal("the holder's upgrade did not complete")
	}
	if out, err := e.cmd("--version", "v2").CombinedOutput(); err != nil {
		t.Fatalf("after the holder exited: %v\n%s", err, out)
	}
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

func waitForLine(t *testing.T, r interface{ Read([]byte) (int, error) }, want string) {
	t.Helper()
	sc := bufio.NewScanner(r)
	var seen []string
	for sc.Scan() {
		if strings.Contains(sc.Text(), want) {
			return
		}
		seen = append(seen, sc.Text())
	}
	t.Fatalf("process ended before printing %q:\n%s", want, strings.Join(seen, "\n"))
}

// A power loss between the swap's links (killed after each of them) never
// boots a rootfs and a kernel of two releases: the loader finishes the
// swap the journal names, then tries that release; a re-run of the same
// upgrade then has nothing left to do but confirm the links.
func TestPowerLossMidSwapBootsOneRelease(t *testing.T) {
	kernelOf := map[string]string{"v1": "5.15.0-v1", "v2": "5.15.0-v2"}
	for _, step := range []string{"previous:k3os", "current:k3os", "previous:kernel", "current:kernel", "previous:k3s"} {
		t.Run(step, func(t *testing.T) {
			e := newEnv(t)
			all := []string{"--rootfs", "--kernel", "--k3s"}
			if out, err := e.cmd(append(all, "--version", "v1")...).CombinedOutput(); err != nil {
				t.Fatalf("install v1: %v\n%s", err, out)
			}
			if out, err := e.cmd(append(all, "--version", "v2", "--test-crash-at", step)...).CombinedOutput(); err == nil {
				t.Fatalf("the run was not killed at %s\n%s", step, out)
			}
			var console strings.Builder
			p, err := boot.Loader(context.Background(), boot.Options{SystemDir: e.sys, NoKexec: true, Out: &console, Cmdline: "console=ttyS0"})
			if err != nil {
				t.Fatalf("the loader after a power loss at %s: %v\n%s", step, err, console.String())
			}
			if kernelOf[p.Boot.Rootfs] != p.Boot.Kernel {
				t.Fatalf("power loss at %s: the loader boots rootfs %s with kernel %s, not one release\n%s", step, p.Boot.Rootfs, p.Boot.Kernel, console.String())
			}
			if p.Boot.Rootfs != "v2" {
				t.Errorf("power loss at %s: the loader boots %s; the swap was begun, so v2 (tried)", step, p.Boot)
			}
			if pending, err := layout.New(e.sys).PendingSwap(); err != nil || pending != nil {
				t.Errorf("a swap journal left after the boot: %v %v", pending, err)
			}
			if out, err := e.cmd(append(all, "--version", "v2")...).CombinedOutput(); err != nil {
				t.Fatalf("re-run after the boot: %v\n%s", err, out)
			}
			checkBootable(t, e.sys)
			if cur, prev := link(t, e.sys, layout.Kernel, "current"), link(t, e.sys, layout.Kernel, "previous"); cur != "5.15.0-v2" || prev != "5.15.0-v1" {
				t.Errorf("kernel current/previous = %s/%s, want 5.15.0-v2/5.15.0-v1", cur, prev)
			}
		})
	}
}

// A rollback cut short between its links is finished by the next run that
// changes links, before its own change: here an upgrade of k3s alone, whose
// own swap would otherwise replace the journal and leave the rootfs and the
// kernel of two releases for good.
func TestCutSwapFinishedBeforeTheNextChange(t *testing.T) {
	e := newEnv(t)
	all := []string{"--rootfs", "--kernel", "--k3s"}
	for _, v := range []string{"v1", "v2"} {
		if out, err := e.cmd(append(all, "--version", v)...).CombinedOutput(); err != nil {
			t.Fatalf("install %s: %v\n%s", v, err, out)
		}
	}
	l := layout.New(e.sys)
	// What a rollback of rootfs and kernel sets, cut after the rootfs's current link.
	changes := []layout.LinkChange{{Component: layout.Rootfs, Link: layout.PreviousLink, Version: "v2"}, {Component: layout.Rootfs, Link: layout.CurrentLink, Version: "v1"},
		{Component: layout.Kernel, Link: layout.PreviousLink, Version: "5.15.0-v2"}, {Component: layout.Kernel, Link: layout.CurrentLink, Version: "5.15.0-v1"}}
	func() {
		defer func() { _ = recover() }()
		_ = l.SetLinks(changes, func(ch layout.LinkChange) {
			if ch.Link == layout.CurrentLink && ch.Component == layout.Rootfs {
				panic("power loss")
			}
		})
	}()
	if cur := link(t, e.sys, layout.Kernel, "current"); cur != "5.15.0-v2" {
		t.Fatalf("the cut rollback moved the kernel already: %s", cur)
	}
	if out, err := e.cmd("--k3s", "--version", "v1").CombinedOutput(); err != nil {
		t.Fatalf("upgrade of k3s after the cut rollback: %v\n%s", err, out)
	}
	for c, want := range map[layout.Component]string{layout.Rootfs: "v1", layout.Kernel: "5.15.0-v1", layout.K3s: "v1-k3s1"} {
		if cur := link(t, e.sys, c, "current"); cur != want {
			t.Errorf("%s current = %s, want %s (the rollback finished, then k3s upgraded)", c, cur, want)
		}
	}
	if pending, _ := l.PendingSwap(); pending != nil {
		t.Errorf("a journal outlived the upgrade: %v", pending)
	}
}

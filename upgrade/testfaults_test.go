package upgrade_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/boot"
	"slipway.dev/slipway/upgrade/layout"
)

// The faults a simulated host arms through SLIPWAY_TEST_CRASH_AT=@FILE:
// a power cut after a named step (the process stops itself and says so in
// FILE.fired, with its pid, for the simulator to kill it and reboot), and
// a full disk at a step of staging.

// armed runs cmd with the fault file fault (relative to dir) holding
// content, as a simulated host's processes run.
func armed(cmd *exec.Cmd, dir, content string) {
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SLIPWAY_TEST_CRASH_AT=@fault")
	if err := os.WriteFile(filepath.Join(dir, "fault"), []byte(content), 0o644); err != nil {
		panic(err)
	}
}

// cutPower waits for cmd to stop itself at its armed step, checks what it
// wrote in fault.fired, and kills it: the power cut.
func cutPower(t *testing.T, cmd *exec.Cmd, dir, step string) {
	t.Helper()
	fired := filepath.Join(dir, "fault.fired")
	deadline := time.Now().Add(2 * time.Minute)
	var b []byte
	for {
		var err error
		if b, err = os.ReadFile(fired); err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no power cut at %s within 2m (fault.fired: %v)", step, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	w := strings.Fields(string(b))
	if len(w) != 2 || w[0] != strconv.Itoa(cmd.Process.Pid) || w[1] != step {
		t.Fatalf("fault.fired says %q, want %d %s", b, cmd.Process.Pid, step)
	}
	if _, err := os.Stat(filepath.Join(dir, "fault")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the fault file is still armed after it fired: %v", err)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

// A power cut armed at each link of the upgrade and of the rollback that
// follows stops the process right there (nothing written after it), once;
// the loader then boots one release, and the step's run again completes.
func TestArmedPowerCut(t *testing.T) {
	kernelOf := map[string]string{"v1": "5.15.0-v1", "v2": "5.15.0-v2"}
	all := []string{"--rootfs", "--kernel", "--k3s"}
	for _, step := range []string{"staged", "renamed:kernel", "current:k3os", "previous:kernel", "rollback:current:k3os", "rollback:previous:kernel"} {
		t.Run(step, func(t *testing.T) {
			e := newEnv(t)
			dir := t.TempDir()
			if out, err := e.cmd(append(all, "--version", "v1")...).CombinedOutput(); err != nil {
				t.Fatalf("install v1: %v\n%s", err, out)
			}
			rollback := strings.HasPrefix(step, "rollback:")
			up := e.cmd(append(all, "--version", "v2")...)
			if rollback {
				if out, err := up.CombinedOutput(); err != nil {
					t.Fatalf("upgrade to v2: %v\n%s", err, out)
				}
				up = exec.Command(slipwayBin, "ops", "rollback", "--system-dir", e.sys, "--lock-file", e.lock, "--reboot=false")
			}
			armed(up, dir, step+"\n")
			if err := up.Start(); err != nil {
				t.Fatal(err)
			}
			cutPower(t, up, dir, step)
			var console strings.Builder
			p, err := boot.Loader(context.Background(), boot.Options{SystemDir: e.sys, NoKexec: true, Out: &console, Cmdline: "console=ttyS0"})
			if err != nil {
				t.Fatalf("the loader after a power cut at %s: %v\n%s", step, err, console.String())
			}
			if kernelOf[p.Boot.Rootfs] != p.Boot.Kernel {
				t.Fatalf("power cut at %s: the loader boots rootfs %s with kernel %s, not one release\n%s", step, p.Boot.Rootfs, p.Boot.Kernel, console.String())
			}
			// The fault fired once: the same run again, armed by nothing, completes.
			again := e.cmd(append(all, "--version", "v2")...)
			if rollback {
				again = exec.Command(slipwayBin, "ops", "rollback", "--system-dir", e.sys, "--lock-file", e.lock, "--reboot=false",
					"--rootfs", "--kernel", "--k3s", "--from", "rootfs=v2", "--from", "kernel=5.15.0-v2", "--from", "k3s=v2-k3s1")
			}
			again.Dir, again.Env = dir, append(os.Environ(), "SLIPWAY_TEST_CRASH_AT=@fault")
			if out, err := again.CombinedOutput(); err != nil {
				t.Fatalf("the run again after the cut: %v\n%s", err, out)
			}
			checkBootable(t, e.sys)
			want := "v2"
			if rollback {
				want = "v1"
			}
			if got := link(t, e.sys, layout.Rootfs, "current"); got != want {
				t.Errorf("rootfs current %s after the run again, want %s", got, want)
			}
		})
	}
}

// A full disk armed at the end of staging fails the stage (exit 6, no
// space) and leaves the system directory as it was, for as long as it is
// armed; disarmed, the same run stages.
func TestArmedFullDisk(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	if out, err := e.cmd("--version", "v1").CombinedOutput(); err != nil {
		t.Fatalf("install v1: %v\n%s", err, out)
	}
	for range 2 { // not once: while the disk is full
		err := unchanged(t, e.sys, func() error {
			cmd := e.cmd("--version", "v2", "--phase", "stage")
			armed(cmd, dir, "enospc staged\n")
			out, err := cmd.CombinedOutput()
			if !strings.Contains(string(out), "no space") {
				t.Errorf("the output does not say there is no space:\n%s", out)
			}
			return err
		})
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != upgrade.ExitNoSpace {
			t.Fatalf("a stage on a full disk: %v, want exit %d", err, upgrade.ExitNoSpace)
		}
	}
	if err := os.Remove(filepath.Join(dir, "fault")); err != nil {
		t.Fatal(err)
	}
	cmd := e.cmd("--version", "v2", "--phase", "stage")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "SLIPWAY_TEST_CRASH_AT=@fault")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("stage once the disk has room: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(e.sys, "k3os", "v2", upgrade.MarkerFile)); err != nil {
		t.Fatalf("v2 not staged: %v", err)
	}
}

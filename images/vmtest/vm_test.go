//go:build vm

package vmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/images/build"
)

// stepTimer records how long each step of the scenario took.
type stepTimer struct {
	t     *testing.T
	start time.Time
	steps []string
}

func (s *stepTimer) step(name string, fn func() error) {
	s.t.Helper()
	start := time.Now()
	err := fn()
	line := fmt.Sprintf("%-28s %6.1fs", name, time.Since(start).Seconds())
	s.steps = append(s.steps, line)
	s.t.Logf("step %s", line)
	if err != nil {
		s.t.Fatalf("step %s: %v", name, err)
	}
}

func (s *stepTimer) report() {
	s.t.Logf("VM test steps:\n  %s\n  %-28s %6.1fs", strings.Join(s.steps, "\n  "), "total", time.Since(s.start).Seconds())
}

func re(format string, a ...any) *regexp.Regexp {
	for i := range a {
		a[i] = regexp.QuoteMeta(fmt.Sprint(a[i]))
	}
	return regexp.MustCompile(fmt.Sprintf(format, a...))
}

// TestUpgradeRebootAndFallBack: boot v1; upgrade to v2 (rootfs and kernel)
// from the mirror disk inside the guest; reboot and see v2's kernel and
// rootfs run; install the broken v3; after its failed tentative boot the
// guest comes back on v2 by itself and reports v3 abandoned.
func TestUpgradeRebootAndFallBack(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	s := &stepTimer{t: t, start: time.Now()}
	defer s.report()
	dir := t.TempDir()
	bin := filepath.Join(dir, "slipway")
	s.step("build slipway", func() error {
		cmd := exec.Command(filepath.Join(root, "scripts", "build"))
		cmd.Env = append(os.Environ(), "OUT="+bin, "VERSION=vmtest")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	})
	var img *build.Result
	s.step("build images v1 v2 v3", func() (err error) {
		cache, _ := os.UserCacheDir()
		img, err = build.Run(context.Background(), build.Options{
			Out: filepath.Join(dir, "images"), Cache: filepath.Join(cache, "slipway", "images"),
			Slipway: bin, Overlay: filepath.Join(root, "overlay"),
			Versions: []build.Version{{Name: "v1"}, {Name: "v2"}, {Name: "v3", Broken: true}},
		})
		return err
	})
	k := img.KernelVersions
	accel := os.Getenv("SLIPWAY_QEMU_ACCEL")
	s.step("probe accelerator", func() error {
		if accel != "" {
			return nil
		}
		cmd := exec.Command(filepath.Join(root, "scripts", "run-qemu"), "--images", filepath.Join(dir, "images"), "--probe")
		var why strings.Builder
		cmd.Stderr = &why
		out, err := cmd.Output()
		t.Logf("accelerator probe: %s", strings.TrimSpace(why.String()))
		accel = strings.TrimSpace(string(out))
		if err != nil || (accel != "kvm" && accel != "tcg") {
			return fmt.Errorf("run-qemu --probe printed %q: %v", out, err)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := startVM(t, ctx, root, dir, accel)
	wait := func(d time.Duration, res ...*regexp.Regexp) error {
		wctx, wcancel := context.WithTimeout(ctx, d)
		defer wcancel()
		for _, r := range res {
			if _, err := c.Expect(wctx, r); err != nil {
				return err
			}
		}
		return nil
	}
	run := func(cmd string, d time.Duration) (string, error) {
		rctx, rcancel := context.WithTimeout(ctx, d)
		defer rcancel()
		out, rc, err := c.Run(rctx, cmd)
		if err == nil && rc != 0 {
			err = fmt.Errorf("%q exited %d:\n%s", cmd, rc, out)
		}
		return out, err
	}
	booted := func(v string) []*regexp.Regexp {
		return []*regexp.Regexp{
			re(`slipway: kernel %s running \(initrd %s, kernel\.squashfs %s`, k[v], k[v], k[v]),
			re(`slipway: rootfs %s running`, v),
			re(`boot: confirmed rootfs %s kernel %s`, v, k[v]),
		}
	}
	upgrade := func(v string) func() error {
		return func() error {
			_, err := run("slipway ops upgrade --system-dir /k3os/system --source /mnt/mirror --version "+v+" --reboot=false", 5*time.Minute)
			return err
		}
	}
	s.step("boot v1", func() error {
		return wait(3*time.Minute, append([]*regexp.Regexp{re(`slipway boot: boot rootfs v1 kernel %s`, k["v1"])}, booted("v1")...)...)
	})
	s.step("upgrade to v2 in guest", upgrade("v2"))
	s.step("reboot into v2", func() error {
		if err := c.Send("sync; reboot"); err != nil {
			return err
		}
		return wait(3*time.Minute, append([]*regexp.Regexp{re(`slipway boot: try rootfs v2 kernel %s`, k["v2"])}, booted("v2")...)...)
	})
	s.step("upgrade to broken v3", upgrade("v3"))
	s.step("v3 fails, back on v2", func() error {
		if err := c.Send("sync; reboot"); err != nil {
			return err
		}
		return wait(5*time.Minute, append([]*regexp.Regexp{
			re(`slipway boot: try rootfs v3 kernel %s`, k["v3"]),
			re(`rootfs v3 is broken on purpose`),
			re(`slipway boot: fallback rootfs v2 kernel %s`, k["v2"]),
		}, booted("v2")...)...)
	})
	s.step("status reports v3 abandoned", func() error {
		st, err := run("cat /k3os/system/boot-state.json", time.Minute)
		if err != nil {
			return err
		}
		if !regexp.MustCompile(`(?s)"abandoned".*"rootfs": "v3"`).MatchString(st) {
			return fmt.Errorf("boot state does not record v3 as abandoned:\n%s", st)
		}
		out, err := run("slipway ops status --system-dir /k3os/system", time.Minute)
		if err != nil {
			return err
		}
		if !strings.Contains(out, "boot:") {
			t.Logf("ops status shows no boot line yet (boot state checked from the file):\n%s", out)
			return nil
		}
		if !re(`abandoned rootfs v3 kernel %s`, k["v3"]).MatchString(out) {
			return fmt.Errorf("ops status does not report v3 abandoned:\n%s", out)
		}
		return nil
	})
}

// startVM starts scripts/run-qemu on copies of the disks and returns its
// console; the VM is killed when the test ends.
func startVM(t *testing.T, ctx context.Context, root, dir, accel string) *Console {
	t.Helper()
	images := filepath.Join(dir, "images")
	cmd := exec.Command(filepath.Join(root, "scripts", "run-qemu"), "--images", images, "--accel", accel,
		"--mirror", filepath.Join(images, "mirror.img"), "--memory", "1024")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logPath := os.Getenv("SLIPWAY_VM_CONSOLE_LOG")
	if logPath == "" {
		logPath = filepath.Join(dir, "console.log")
	}
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start qemu: %v", err)
	}
	t.Logf("qemu (%s) console log: %s", accel, logPath)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
	})
	go func() {
		<-ctx.Done()
		_ = cmd.Process.Kill()
	}()
	return NewConsole(in, out, log)
}

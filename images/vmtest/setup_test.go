//go:build vm || vmnode

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

// re builds a regexp from format with its arguments quoted.
func re(format string, a ...any) *regexp.Regexp {
	for i := range a {
		a[i] = regexp.QuoteMeta(fmt.Sprint(a[i]))
	}
	return regexp.MustCompile(fmt.Sprintf(format, a...))
}

func buildSlipway(root, bin string) error {
	cmd := exec.Command(filepath.Join(root, "scripts", "build"))
	cmd.Env = append(os.Environ(), "OUT="+bin, "VERSION=vmtest")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

func buildImages(root, dir, bin string, versions ...build.Version) (*build.Result, error) {
	if len(versions) == 0 {
		versions = []build.Version{{Name: "v1"}, {Name: "v2"}, {Name: "v3", Broken: true}}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return nil, err
	}
	return build.Run(context.Background(), build.Options{
		Out: filepath.Join(dir, "images"), Cache: filepath.Join(cache, "slipway", "images"),
		Slipway: bin, Overlay: filepath.Join(root, "overlay"),
		Versions: versions,
	})
}

// probe asks scripts/run-qemu which accelerator works, unless accel is set.
func probe(t *testing.T, root, accel string, img *build.Result) (string, error) {
	if accel != "" {
		return accel, nil
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "run-qemu"), "--images", filepath.Dir(filepath.Dir(img.Kernel)), "--probe")
	var why strings.Builder
	cmd.Stderr = &why
	out, err := cmd.Output()
	t.Logf("accelerator probe: %s", strings.TrimSpace(why.String()))
	accel = strings.TrimSpace(string(out))
	if err != nil || (accel != "kvm" && accel != "tcg") {
		return "", fmt.Errorf("run-qemu --probe printed %q: %v", out, err)
	}
	return accel, nil
}

// startVM starts scripts/run-qemu and returns its console; the VM is killed
// when the test ends. extra goes to run-qemu after the defaults (a later
// option wins; qemu's own arguments follow a "--").
func startVM(t *testing.T, ctx context.Context, root, dir, accel string, extra ...string) *Console {
	t.Helper()
	images := filepath.Join(dir, "images")
	cmd := exec.Command(filepath.Join(root, "scripts", "run-qemu"), "--images", images, "--accel", accel,
		"--mirror", filepath.Join(images, "mirror.img"), "--memory", "1024",
		"--cloud-config", filepath.Join(root, "overlay", "usr", "share", "slipway", "cloud-config.yaml"))
	cmd.Args = append(cmd.Args, extra...)
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

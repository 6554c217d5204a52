//go:build vm || vmnode

package vmtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"slipway.dev/slipway/images/build"
)

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
	s.step("build slipway", func() error { return buildSlipway(root, bin) })
	var img *build.Result
	s.step("build images v1 v2 v3", func() (err error) { img, err = buildImages(root, dir, bin); return err })
	accel := os.Getenv("SLIPWAY_QEMU_ACCEL")
	s.step("probe accelerator", func() (err error) { accel, err = probe(t, root, accel, img); return err })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	g := &guest{t: t, ctx: ctx, c: startVM(t, ctx, root, dir, accel), k: img.KernelVersions}

	s.step("boot v1", func() error {
		b := g.booted("boot", "v1")
		// rcS installs the cloud-config (qemu fw_cfg) before the confirm service runs.
		b = append(b[:len(b)-1], re(`slipway: cloud-config installed`), b[len(b)-1])
		return g.wait(3*time.Minute, b...)
	})
	s.step("upgrade to v2 in guest", func() error { return g.upgrade("v2") })
	s.step("reboot into v2", func() error {
		return g.reboot(3*time.Minute, g.booted("try", "v2")...)
	})
	s.step("upgrade to broken v3", func() error { return g.upgrade("v3") })
	s.step("v3 fails, back on v2", func() error {
		return g.reboot(5*time.Minute, append([]*regexp.Regexp{
			re(`slipway boot: try rootfs v3 kernel %s`, g.k["v3"]),
			re(`rootfs v3 is broken on purpose`),
		}, g.booted("fallback", "v2")...)...)
	})
	s.step("status reports v3 abandoned", g.abandoned)
}

// guest drives the VM's console.
type guest struct {
	t   *testing.T
	ctx context.Context
	c   *Console
	k   map[string]string // release -> kernel version
	// ready is what the console shows once the shell the test types into
	// holds the console after a boot: input typed before is lost on the
	// systemd node (the shell's unit takes the terminal when it starts);
	// busybox init's shell reads what was typed ahead, but only once the
	// boot's services have started, which under load outlasts a command's
	// timeout (the k3os-like node's OpenRC default runlevel).
	ready []*regexp.Regexp
}

func (g *guest) wait(d time.Duration, res ...*regexp.Regexp) error {
	ctx, cancel := context.WithTimeout(g.ctx, d)
	defer cancel()
	for _, r := range res {
		if _, err := g.c.Expect(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

func (g *guest) run(cmd string, d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(g.ctx, d)
	defer cancel()
	out, rc, err := g.c.Run(ctx, cmd)
	if err == nil && rc != 0 {
		err = fmt.Errorf("%q exited %d:\n%s", cmd, rc, out)
	}
	return out, err
}

// booted is what the console shows when the loader took action for v and
// v's kernel and rootfs came up and confirmed.
func (g *guest) booted(action, v string) []*regexp.Regexp {
	kv := g.k[v]
	return append([]*regexp.Regexp{
		re(`slipway boot: %s rootfs %s kernel %s`, action, v, kv),
		re(`slipway: kernel %s running \(initrd %s, kernel\.squashfs %s`, kv, kv, kv),
		re(`slipway: rootfs %s running`, v),
		re(`boot: confirmed rootfs %s kernel %s`, v, kv),
	}, g.ready...)
}

func (g *guest) upgrade(v string) error {
	_, err := g.run("slipway ops upgrade --system-dir /k3os/system --source /mnt/mirror --version "+v+" --reboot=false", 5*time.Minute)
	return err
}

func (g *guest) reboot(d time.Duration, res ...*regexp.Regexp) error {
	if err := g.c.Send("sync; reboot"); err != nil {
		return err
	}
	return g.wait(d, res...)
}

// abandoned checks that the boot record and `ops status` both report v3 abandoned.
func (g *guest) abandoned() error {
	st, err := g.run("cat /k3os/system/boot-state.json", time.Minute)
	if err != nil {
		return err
	}
	if !regexp.MustCompile(`(?s)"abandoned".*"rootfs": "v3"`).MatchString(st) {
		return fmt.Errorf("boot state does not record v3 as abandoned:\n%s", st)
	}
	out, err := g.run("slipway ops status --system-dir /k3os/system", time.Minute)
	if err != nil {
		return err
	}
	if !re(`abandoned rootfs v3 kernel %s`, g.k["v3"]).MatchString(out) {
		return fmt.Errorf("ops status does not report v3 abandoned:\n%s", out)
	}
	return nil
}

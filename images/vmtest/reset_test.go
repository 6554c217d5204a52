//go:build vmnode

package vmtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"slipway.dev/slipway/images/build"
)

// resetRounds is how many times the durability test cuts an upgrade short
// (SLIPWAY_VM_RESETS overrides it).
const resetRounds = 10

// TestResetDuringUpgrade resets the machine (qemu system_reset through the
// monitor: the guest loses power, the qemu process stays) at a random instant
// of `ops upgrade`, again and again (every other round near its end, where
// the swap is). After each reset the guest must boot a
// complete version (the old or the new one, its rootfs and kernel from the
// same release, confirmed), and a re-run of the same upgrade must finish and
// boot the target.
func TestResetDuringUpgrade(t *testing.T) {
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
	s.step("build images v1 v2 v3", func() (err error) {
		img, err = buildImages(root, dir, bin, build.Version{Name: "v1"}, build.Version{Name: "v2"}, build.Version{Name: "v3"})
		return err
	})
	accel := os.Getenv("SLIPWAY_QEMU_ACCEL")
	s.step("probe accelerator", func() (err error) { accel, err = probe(t, root, accel, img); return err })
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	sock := filepath.Join(dir, "monitor.sock")
	g := &guest{t: t, ctx: ctx, k: img.KernelVersions}
	g.c = startVM(t, ctx, root, dir, accel, "--", "-monitor", "unix:"+sock+",server=on,wait=off")
	r := &resetter{guest: g, mon: NewMonitor(sock), versions: []string{"v1", "v2", "v3"}}

	s.step("boot v1", func() error { return g.wait(3*time.Minute, g.booted("boot", "v1")...) })
	var took time.Duration
	s.step("calibrate: upgrade to v2", func() (err error) { took, err = r.timedUpgrade("v2"); return err })
	s.step("reboot into v2", func() error { return g.reboot(3*time.Minute, g.booted("try", "v2")...) })
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SLIPWAY_VM_RESET_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("an uninterrupted upgrade took %s; reset seed %d (SLIPWAY_VM_RESET_SEED)", took.Round(time.Millisecond), seed)
	r.current, r.previous = "v2", "v1"
	for i := range rounds() {
		at := resetAt(rng, i, took)
		s.step(fmt.Sprintf("round %d: reset %s", i+1, at), func() error { return r.round(at) })
	}
	t.Logf("after resets: %v", r.outcomes)
}

// lastStaged is the console line of the upgrade's last artifact staged in
// full: the swap (renames, links, boot record) follows it at once.
var lastStaged = regexp.MustCompile(`k3os-initrd-amd64 \[=+\][^\n]*100%`)

// resetPlan is when a round resets the machine: delay after the upgrade
// was typed, or, with after set, delay after the console shows it.
type resetPlan struct {
	after *regexp.Regexp
	delay time.Duration
}

func (p resetPlan) String() string {
	if p.after != nil {
		return fmt.Sprintf("%.2fs after the last artifact staged", p.delay.Seconds())
	}
	return fmt.Sprintf("%.1fs into the upgrade", p.delay.Seconds())
}

// resetAt plans round i's reset in an upgrade that takes about took: even
// rounds anywhere in it, odd rounds within 0.8 s after its last artifact is
// staged, where the swap happens (a uniform instant rarely lands there).
func resetAt(rng *rand.Rand, i int, took time.Duration) resetPlan {
	if i%2 == 0 {
		return resetPlan{delay: time.Duration(rng.Int64N(int64(took)))}
	}
	return resetPlan{after: lastStaged, delay: time.Duration(rng.Int64N(int64(800 * time.Millisecond)))}
}

func rounds() int {
	if n, err := strconv.Atoi(os.Getenv("SLIPWAY_VM_RESETS")); err == nil && n > 0 {
		return n
	}
	return resetRounds
}

// resetter runs the rounds: current and previous are the versions the
// system directory's links name when a round starts.
type resetter struct {
	*guest
	mon               *Monitor
	versions          []string
	current, previous string
	outcomes          map[string]int // "old", "new" boots after a reset
}

func (r *resetter) upgradeCmd(v string) string {
	return "slipway ops upgrade --system-dir /k3os/system --source /mnt/mirror --version " + v + " --reboot=false"
}

func (r *resetter) timedUpgrade(v string) (time.Duration, error) {
	start := time.Now()
	_, err := r.run(r.upgradeCmd(v), 5*time.Minute)
	return time.Since(start), err
}

// next is the version neither current nor previous: its folders are
// removed first, as an operator frees space, so the upgrade stages it anew.
func (r *resetter) next() string {
	for _, v := range r.versions {
		if v != r.current && v != r.previous {
			return v
		}
	}
	panic("resetter needs three versions")
}

// round upgrades to the next version, resets the machine after at, checks
// the boot, re-runs the upgrade and boots the target.
func (r *resetter) round(at resetPlan) error {
	target := r.next()
	clean := fmt.Sprintf("rm -rf /k3os/system/k3os/%s /k3os/system/kernel/%s && sync", target, r.k[target])
	if _, err := r.run(clean, time.Minute); err != nil {
		return err
	}
	if err := r.c.Send(r.upgradeCmd(target)); err != nil {
		return err
	}
	if at.after != nil {
		if err := r.wait(5*time.Minute, at.after); err != nil {
			return err
		}
	}
	time.Sleep(at.delay)
	if out, err := r.mon.Do("system_reset", 10*time.Second); err != nil {
		return fmt.Errorf("system_reset: %w (%s)", err, out)
	}
	booted, err := r.bootedAfterReset()
	if err != nil {
		return err
	}
	switch booted {
	case r.current:
		r.count("old")
	case target:
		r.count("new")
	default:
		return fmt.Errorf("after the reset the guest booted %s: neither %s (before) nor %s (target)", booted, r.current, target)
	}
	r.t.Logf("upgrade %s -> %s, reset %s: booted %s", r.current, target, at, booted)
	if _, err := r.run(r.upgradeCmd(target), 5*time.Minute); err != nil {
		return fmt.Errorf("re-run after the reset: %w", err)
	}
	if booted != target {
		if err := r.reboot(3*time.Minute, r.booted("try", target)...); err != nil {
			return fmt.Errorf("boot %s after the re-run: %w", target, err)
		}
	}
	r.previous, r.current = r.current, target
	return nil
}

func (r *resetter) count(k string) {
	if r.outcomes == nil {
		r.outcomes = map[string]int{}
	}
	r.outcomes[k]++
}

// bootedAfterReset waits for the loader's choice and the boot it leads to,
// and checks that the rootfs and kernel that came up belong to one release
// and confirmed.
func (r *resetter) bootedAfterReset() (string, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 3*time.Minute)
	defer cancel()
	m, err := r.c.Expect(ctx, regexp.MustCompile(`slipway boot: (\w+) rootfs (\S+) kernel (\S+)\s`))
	if err != nil {
		return "", fmt.Errorf("no boot after the reset: %w", err)
	}
	v, kv := m[2], m[3]
	if r.k[v] != kv {
		return "", fmt.Errorf("loader chose rootfs %s with kernel %s: not one release (want kernel %s)", v, kv, r.k[v])
	}
	return v, r.wait(3*time.Minute, r.booted(m[1], v)[1:]...)
}

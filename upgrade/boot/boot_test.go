package boot

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/upgrade/bootstate"
	"slipway.dev/slipway/upgrade/layout"
)

// system writes a system directory holding rootfs and kernel versions vs,
// with current and previous links.
func system(t *testing.T, current, previous string, vs ...string) string {
	t.Helper()
	dir := t.TempDir()
	l := layout.New(dir)
	for _, v := range vs {
		for _, c := range []layout.Component{layout.Rootfs, layout.Kernel} {
			if err := os.MkdirAll(l.VersionDir(c, v), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []layout.Component{layout.Rootfs, layout.Kernel} {
		if err := l.SetLink(c, layout.CurrentLink, current); err != nil {
			t.Fatal(err)
		}
		if previous != "" {
			if err := l.SetLink(c, layout.PreviousLink, previous); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func boot(t *testing.T, dir string) *Plan {
	t.Helper()
	p, err := Loader(context.Background(), Options{SystemDir: dir, NoKexec: true, MaxAttempts: 1,
		Cmdline: "console=ttyS0 slipway.rootfs=old BOOT_IMAGE=x panic=-1", Out: io.Discard,
		Now: func() time.Time { return time.Unix(100, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoaderTriesThenFallsBack(t *testing.T) {
	dir := system(t, "v3", "v2", "v2", "v3")
	if err := bootstate.Save(dir, bootstate.State{Confirmed: bootstate.Versions{Rootfs: "v2", Kernel: "v2"}}); err != nil {
		t.Fatal(err)
	}
	p := boot(t, dir)
	if p.Action != bootstate.Try || p.Boot.Rootfs != "v3" {
		t.Fatalf("first boot: %s %s, want try v3", p.Action, p.Boot)
	}
	if want := "console=ttyS0 panic=-1 slipway.rootfs=v3 slipway.kernel=v3 slipway.boot=try"; p.Cmdline != want {
		t.Fatalf("cmdline %q, want %q", p.Cmdline, want)
	}
	if !strings.HasSuffix(p.Kernel, "kernel/v3/kernel.squashfs") || !strings.HasSuffix(p.Initrd, "kernel/v3/initrd") {
		t.Fatalf("kernel files %s %s", p.Kernel, p.Initrd)
	}
	// v3 never confirmed: the next boot falls back and relinks.
	p = boot(t, dir)
	if p.Action != bootstate.FallBack || p.Boot.Rootfs != "v2" || p.Boot.Kernel != "v2" {
		t.Fatalf("second boot: %s %s, want fallback to v2", p.Action, p.Boot)
	}
	l := layout.New(dir)
	for _, c := range []layout.Component{layout.Rootfs, layout.Kernel} {
		cur, _ := l.Current(c)
		prev, _ := l.Previous(c)
		if cur != "v2" || prev != "v3" {
			t.Fatalf("%s links after fallback: current %s previous %s; want v2, v3", c, cur, prev)
		}
	}
	st, err := bootstate.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := st.LastAbandoned(); !ok || a.Rootfs != "v3" || !strings.Contains(st.Summary(), "abandoned rootfs v3 kernel v3") {
		t.Fatalf("state after fallback: %s", st.Summary())
	}
	// Third boot: v2 is confirmed and boots plainly.
	if p = boot(t, dir); p.Action != bootstate.Boot || p.Boot.Rootfs != "v2" {
		t.Fatalf("third boot: %s %s, want boot v2", p.Action, p.Boot)
	}
}

func TestConfirmUsesCmdline(t *testing.T) {
	dir := system(t, "v2", "v1", "v1", "v2")
	if _, err := Loader(context.Background(), Options{SystemDir: dir, NoKexec: true, Out: io.Discard}); err != nil {
		t.Fatal(err)
	}
	st, err := Confirm(ConfirmOptions{SystemDir: dir, Cmdline: "console=ttyS0 slipway.rootfs=v2 slipway.kernel=v1"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Confirmed != (bootstate.Versions{Rootfs: "v2", Kernel: "v1"}) || st.Tentative != nil {
		t.Fatalf("confirmed %s tentative %v; want rootfs v2 kernel v1 from the command line", st.Confirmed, st.Tentative)
	}
}

func TestDecideWithoutCurrentFails(t *testing.T) {
	if _, err := Decide(Options{SystemDir: t.TempDir()}); err == nil {
		t.Fatal("empty system dir: want an error")
	}
}

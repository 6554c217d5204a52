package hostcheck

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
)

// host is a node directory with releases v1 and v2 installed (rootfs,
// kernel and k3s folders with their markers), current at v1.
func host(t *testing.T) (dir string, l layout.Layout) {
	t.Helper()
	dir = t.TempDir()
	l = layout.New(filepath.Join(dir, testenv.K3osSystemDir))
	for _, rel := range []string{"v1", "v2"} {
		for c, v := range map[layout.Component]string{layout.Rootfs: rel, layout.Kernel: "5.15.0-" + rel, layout.K3s: rel + "-k3s1"} {
			d := l.VersionDir(c, v)
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(upgrade.Marker{Release: rel})
			if err := os.WriteFile(filepath.Join(d, upgrade.MarkerFile), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	links(t, l, "v1", "5.15.0-v1", "v1-k3s1")
	return dir, l
}

func links(t *testing.T, l layout.Layout, rootfs, kernel, k3s string) {
	t.Helper()
	for c, v := range map[layout.Component]string{layout.Rootfs: rootfs, layout.Kernel: kernel, layout.K3s: k3s} {
		if err := l.SetLink(c, layout.CurrentLink, v); err != nil {
			t.Fatal(err)
		}
	}
}

func logBoot(t *testing.T, dir, line string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, testenv.BootsLog), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, c *Checker, at time.Time, slots map[string]bool) []Finding {
	t.Helper()
	f, err := c.Check(at, slots)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func wantOne(t *testing.T, got []Finding, inv, msg string) {
	t.Helper()
	if len(got) != 1 || got[0].Invariant != inv || !strings.Contains(got[0].Message, msg) {
		t.Fatalf("findings %v, want one %s saying %q", got, inv, msg)
	}
}

// A node that boots rootfs v2 with kernel v1 is reported once; its boots of
// one release are not.
func TestMixedBootPlanted(t *testing.T) {
	dir, _ := host(t)
	c := New(filepath.Dir(dir), []string{filepath.Base(dir)})
	t0 := time.Unix(1000, 0)
	logBoot(t, dir, "1 rootfs=v1 kernel=5.15.0-v1 k3s=v1-k3s1")
	if got := check(t, c, t0, nil); len(got) != 0 {
		t.Fatalf("one release booted: %v", got)
	}
	logBoot(t, dir, "2 rootfs=v2 kernel=5.15.0-v1 k3s=v1-k3s1")
	wantOne(t, check(t, c, t0, nil), InvMixedBoot, "rootfs of v2, kernel of v1, k3s of v1")
	if got := check(t, c, t0.Add(time.Second), nil); len(got) != 0 {
		t.Fatalf("reported twice: %v", got)
	}
	logBoot(t, dir, "3 rootfs=v2 kernel=5.15.0-v2 k3s=v1-k3s1") // k3s left behind
	wantOne(t, check(t, c, t0, nil), InvMixedBoot, "boot 3")
	if n := len(c.Findings()); n != 2 {
		t.Fatalf("%d findings kept, want 2", n)
	}
}

// A node with a slot may have v2 activated beside the v1 it runs; without
// a slot it may not, beyond the grace (at once once quiet). A swap cut
// short counts as what the loader would finish.
func TestStagedWithoutSlotPlanted(t *testing.T) {
	dir, l := host(t)
	c := &Checker{Nodes: map[string]string{"node-1": dir}, Grace: 30 * time.Second}
	t0 := time.Unix(1000, 0)
	logBoot(t, dir, "1 rootfs=v1 kernel=5.15.0-v1 k3s=v1-k3s1")
	if got := check(t, c, t0, nil); len(got) != 0 {
		t.Fatalf("v1 booted and next: %v", got)
	}
	// The swap cut after the rootfs's link: the loader would boot v2 whole.
	changes := []layout.LinkChange{{Component: layout.Rootfs, Link: layout.CurrentLink, Version: "v2"}, {Component: layout.Kernel, Link: layout.CurrentLink, Version: "5.15.0-v2"}}
	func() {
		defer func() { _ = recover() }()
		_ = l.SetLinks(changes, func(layout.LinkChange) { panic("power cut") })
	}()
	h, err := ReadHost("node-1", dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Versions{Rootfs: "v2", Kernel: "5.15.0-v2", K3s: "v1-k3s1"}); h.Next != want {
		t.Fatalf("next boot %v, want %v (the journal finished)", h.Next, want)
	}
	if got := check(t, c, t0.Add(time.Second), map[string]bool{"node-1": true}); len(got) != 0 {
		t.Fatalf("v2 activated within a slot: %v", got)
	}
	if got := check(t, c, t0.Add(2*time.Second), nil); len(got) != 0 {
		t.Fatalf("within the grace: %v", got)
	}
	wantOne(t, check(t, c, t0.Add(33*time.Second), nil), InvStagedWithoutSlot, "would boot rootfs v2 kernel 5.15.0-v2 k3s v1-k3s1, not rootfs v1")
	// Rolled back: nothing to report; activated again, quiet reports at once.
	if _, err := l.FinishSwap(); err != nil {
		t.Fatal(err)
	}
	links(t, l, "v1", "5.15.0-v1", "v1-k3s1")
	if got := check(t, c, t0.Add(40*time.Second), nil); len(got) != 0 {
		t.Fatalf("rolled back: %v", got)
	}
	links(t, l, "v1", "5.15.0-v2", "v1-k3s1")
	q, err := c.Quiet(t0.Add(41 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wantOne(t, q, InvStagedWithoutSlot, "kernel 5.15.0-v2")
}

func TestMixed(t *testing.T) {
	for _, tc := range []struct {
		rel  map[layout.Component]string
		want string
	}{
		{map[layout.Component]string{layout.Rootfs: "v1", layout.Kernel: "v1"}, ""},
		{map[layout.Component]string{layout.Rootfs: "v1", layout.Kernel: "v1", layout.K3s: "v1"}, ""},
		{map[layout.Component]string{layout.Rootfs: "v1", layout.Kernel: ""}, ""}, // no marker: says nothing
		{map[layout.Component]string{layout.Rootfs: "v2", layout.Kernel: "v1"}, "rootfs of v2, kernel of v1"},
		{map[layout.Component]string{layout.Rootfs: "v2", layout.Kernel: "v2", layout.K3s: "v1"}, "rootfs of v2, kernel of v2, k3s of v1"},
	} {
		if got := Mixed(tc.rel); got != tc.want {
			t.Errorf("Mixed(%v) = %q, want %q", tc.rel, got, tc.want)
		}
	}
}

func TestParseBoot(t *testing.T) {
	b, ok := parseBoot("4 rootfs=v2 kernel=5.15.0-v2 k3s=")
	if !ok || b.N != "4" || b.Versions != (Versions{Rootfs: "v2", Kernel: "5.15.0-v2"}) {
		t.Fatalf("parseBoot = %+v %t", b, ok)
	}
	if _, ok := parseBoot("garbage"); ok {
		t.Fatal("garbage parsed")
	}
}

func TestBootedStaged(t *testing.T) {
	v1 := Versions{Rootfs: "v1", Kernel: "5.15.0-v1", K3s: "v1-k3s1"}
	v2 := Versions{Rootfs: "v2", Kernel: "5.15.0-v2", K3s: "v1-k3s1"}
	for _, tc := range []struct {
		name     string
		ran, now Boot
		want     bool
	}{
		{"no boot since", Boot{"1", v1}, Boot{"1", v1}, false},
		{"booted what it ran (undone, or a rollback finished)", Boot{"1", v1}, Boot{"2", v1}, false},
		{"booted the activated release", Boot{"1", v1}, Boot{"2", v2}, true},
		{"booted part of it", Boot{"1", v1}, Boot{"2", Versions{Rootfs: "v1", Kernel: "5.15.0-v2", K3s: "v1-k3s1"}}, true},
	} {
		if got := BootedStaged(tc.ran, tc.now); got != tc.want {
			t.Errorf("%s: BootedStaged = %t, want %t", tc.name, got, tc.want)
		}
	}
}

// The grace ends at the node's own boot: a node seen without a slot with
// v2 activated that boots v2 is reported at once, far within the grace;
// one that boots what it ran, or reboots within a slot, is not.
func TestStagedWithoutSlotOwnBootPlanted(t *testing.T) {
	dir, l := host(t)
	c := &Checker{Nodes: map[string]string{"node-1": dir}} // DefaultGrace
	t0 := time.Unix(1000, 0)
	logBoot(t, dir, "1 rootfs=v1 kernel=5.15.0-v1 k3s=v1-k3s1")
	links(t, l, "v2", "5.15.0-v2", "v2-k3s1") // activated, the slot ended
	if got := check(t, c, t0, nil); len(got) != 0 {
		t.Fatalf("within the grace: %v", got)
	}
	// Undone, then the node reboots into what it ran: nothing.
	links(t, l, "v1", "5.15.0-v1", "v1-k3s1")
	logBoot(t, dir, "2 rootfs=v1 kernel=5.15.0-v1 k3s=v1-k3s1")
	if got := check(t, c, t0.Add(time.Second), nil); len(got) != 0 {
		t.Fatalf("booted what it ran: %v", got)
	}
	// Activated within a slot and booted there: nothing.
	links(t, l, "v2", "5.15.0-v2", "v2-k3s1")
	slot := map[string]bool{"node-1": true}
	if got := check(t, c, t0.Add(2*time.Second), slot); len(got) != 0 {
		t.Fatalf("activated in a slot: %v", got)
	}
	logBoot(t, dir, "3 rootfs=v2 kernel=5.15.0-v2 k3s=v2-k3s1")
	if got := check(t, c, t0.Add(3*time.Second), slot); len(got) != 0 {
		t.Fatalf("booted in a slot: %v", got)
	}
	// Back at v1 (a rollback in the slot), then v2 activated again and the
	// slot gone: the node's own boot into v2, 5 s later, is reported.
	links(t, l, "v1", "5.15.0-v1", "v1-k3s1")
	logBoot(t, dir, "4 rootfs=v1 kernel=5.15.0-v1 k3s=v1-k3s1")
	if got := check(t, c, t0.Add(4*time.Second), slot); len(got) != 0 {
		t.Fatalf("rolled back in a slot: %v", got)
	}
	links(t, l, "v2", "5.15.0-v2", "v2-k3s1")
	if got := check(t, c, t0.Add(5*time.Second), nil); len(got) != 0 {
		t.Fatalf("within the grace: %v", got)
	}
	logBoot(t, dir, "5 rootfs=v2 kernel=5.15.0-v2 k3s=v2-k3s1")
	wantOne(t, check(t, c, t0.Add(10*time.Second), nil), InvStagedWithoutSlot,
		"node node-1 booted rootfs v2 kernel 5.15.0-v2 k3s v2-k3s1 (boot 5) holding no slot, over rootfs v1 kernel 5.15.0-v1 k3s v1-k3s1 it ran (boot 4)")
	if got := check(t, c, t0.Add(11*time.Second), nil); len(got) != 0 {
		t.Fatalf("reported twice, or the boot it runs now reported: %v", got)
	}
}

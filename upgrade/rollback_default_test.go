package upgrade

import (
	"context"
	"maps"
	"os"
	"slices"
	"testing"

	"slipway.dev/slipway/upgrade/layout"
)

// TestLastSwapped: `ops rollback` without component switches undoes what
// the last upgrade swapped, told by the release markers of the current
// folders: a kernel the release kept is not rolled back, a k3s swapped
// with the rootfs is.
func TestLastSwapped(t *testing.T) {
	type folder struct {
		c                 layout.Component
		current, previous string
		release, prevRel  string // markers; "" = none
	}
	for _, c := range []struct {
		name    string
		folders []folder
		want    []layout.Component
	}{
		{"rootfs and kernel of v2", []folder{{layout.Rootfs, "v2", "v1", "v2", "v1"}, {layout.Kernel, "k2", "k1", "v2", "v1"}},
			[]layout.Component{layout.Rootfs, layout.Kernel}},
		{"v2 kept v1's kernel (previous k0 from v0)", []folder{{layout.Rootfs, "v2", "v1", "v2", "v1"}, {layout.Kernel, "k1", "k0", "v1", "v0"}},
			[]layout.Component{layout.Rootfs}},
		{"v2 kept the first kernel (no previous)", []folder{{layout.Rootfs, "v2", "v1", "v2", "v1"}, {layout.Kernel, "k1", "", "v1", ""}},
			[]layout.Component{layout.Rootfs}},
		{"k3s swapped with the rootfs", []folder{{layout.Rootfs, "v2", "v1", "v2", "v1"}, {layout.Kernel, "k2", "k1", "v2", "v1"}, {layout.K3s, "s2", "s1", "v2", "v1"}},
			[]layout.Component{layout.Rootfs, layout.Kernel, layout.K3s}},
		{"a first k3s: nothing to go back to", []folder{{layout.Rootfs, "v2", "v1", "v2", "v1"}, {layout.K3s, "s2", "", "v2", ""}},
			[]layout.Component{layout.Rootfs}},
		{"folders k3os installed (no markers)", []folder{{layout.Rootfs, "v2", "v1", "", ""}, {layout.Kernel, "k1", "k0", "", ""}},
			DefaultComponents},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := layout.New(t.TempDir())
			for _, f := range c.folders {
				for _, v := range []struct{ name, link, rel string }{{f.current, layout.CurrentLink, f.release}, {f.previous, layout.PreviousLink, f.prevRel}} {
					if v.name == "" {
						continue
					}
					dir := l.VersionDir(f.c, v.name)
					if err := os.MkdirAll(dir, 0o755); err != nil {
						t.Fatal(err)
					}
					if v.rel != "" {
						if err := writeMarker(dir, Marker{Release: v.rel}); err != nil {
							t.Fatal(err)
						}
					}
					if err := l.SetLink(f.c, v.link, v.name); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got := LastSwapped(l); !slices.Equal(got, c.want) {
				t.Errorf("LastSwapped = %v, want %v", got, c.want)
			}
			if c.name != "v2 kept the first kernel (no previous)" {
				return
			}
			// The rollback itself: the rootfs back to v1, the kernel untouched,
			// where rolling back both used to fail for the kernel's missing previous.
			res, err := Rollback(context.Background(), RollbackOptions{SystemDir: l.Root, LockFile: l.Root + "/lock"})
			if err != nil {
				t.Fatalf("rollback: %v", err)
			}
			if cur, _ := l.Current(layout.Rootfs); cur != "v1" || len(res.Components) != 1 {
				t.Errorf("rootfs current %s after the rollback, components %+v", cur, res.Components)
			}
			if cur, _ := l.Current(layout.Kernel); cur != "k1" {
				t.Errorf("kernel current %s, want k1 untouched", cur)
			}
		})
	}
}

func TestWholeSwap(t *testing.T) {
	cut := []layout.LinkChange{{Component: layout.Rootfs, Link: layout.PreviousLink, Version: "v1"}, {Component: layout.Rootfs, Link: layout.CurrentLink, Version: "v2"},
		{Component: layout.Kernel, Link: layout.PreviousLink, Version: "5.15.0-v1"}, {Component: layout.Kernel, Link: layout.CurrentLink, Version: "5.15.0-v2"}}
	for _, c := range []struct {
		name       string
		components []layout.Component
		from       map[layout.Component]string
		pending    []layout.LinkChange
		want       []layout.Component
		wantFrom   map[layout.Component]string
		added      int
	}{
		{"no journal: as asked", []layout.Component{layout.Rootfs}, map[layout.Component]string{layout.Rootfs: "v2"}, nil,
			[]layout.Component{layout.Rootfs}, map[layout.Component]string{layout.Rootfs: "v2"}, 0},
		{"a cut swap adds the kernel, from its journaled version", []layout.Component{layout.Rootfs}, map[layout.Component]string{layout.Rootfs: "v2"}, cut,
			[]layout.Component{layout.Rootfs, layout.Kernel}, map[layout.Component]string{layout.Rootfs: "v2", layout.Kernel: "5.15.0-v2"}, 1},
		{"without --from: the kernel added, no from", []layout.Component{layout.Rootfs}, nil, cut,
			[]layout.Component{layout.Rootfs, layout.Kernel}, nil, 1},
		{"all asked already", []layout.Component{layout.Kernel, layout.Rootfs}, nil, cut,
			[]layout.Component{layout.Kernel, layout.Rootfs}, nil, 0},
	} {
		got, from, added := wholeSwap(c.components, c.from, c.pending)
		if !slices.Equal(got, c.want) || !maps.Equal(from, c.wantFrom) || len(added) != c.added {
			t.Errorf("%s: %v %v %v, want %v %v (%d added)", c.name, got, from, added, c.want, c.wantFrom, c.added)
		}
	}
}

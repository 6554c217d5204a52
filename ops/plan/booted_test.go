package plan

import "testing"

func TestRunning(t *testing.T) {
	v1, v2 := Versions{"v1", "k1", "s1"}, Versions{"v2", "k2", "s2"}
	for _, c := range []struct {
		name string
		e    BootEvidence
		want Versions
	}{
		{"first sight of a boot: current", BootEvidence{BootID: "b1", Current: v1}, v1},
		{"same boot after a swap: what was recorded", BootEvidence{BootID: "b1", Current: v2, RecordedBoot: "b1", Recorded: v1}, v1},
		{"new boot after a swap: current", BootEvidence{BootID: "b2", Current: v2, RecordedBoot: "b1", Recorded: v1}, v2},
		{"record without versions (a bare Node): current", BootEvidence{BootID: "b1", Current: v2, RecordedBoot: "b1"}, v2},
		{"the loader fell back: the command line wins", BootEvidence{BootID: "b2", Current: v2, CmdlineRootfs: "v1"}, Versions{"v1", "k2", "s2"}},
		{"the loader agrees", BootEvidence{BootID: "b2", Current: v2, CmdlineRootfs: "v2"}, v2},
	} {
		if got, why := Running(c.e); got != c.want || why == "" {
			t.Errorf("%s: Running = %+v (%s), want %+v", c.name, got, why, c.want)
		}
	}
}

func TestStaged(t *testing.T) {
	v1, v2 := Versions{"v1", "k1", "s1"}, Versions{"v2", "k2", "s1"}
	if s := Staged(v1, v2); s != (Versions{Rootfs: "v2", Kernel: "k2"}) {
		t.Errorf("Staged = %+v", s)
	}
	if s := Staged(v1, v1); s != (Versions{}) {
		t.Errorf("Staged of nothing = %+v", s)
	}
}

func TestComponentsBehind(t *testing.T) {
	markers := map[string]string{"k3s/v1.23.17+k3s1": "v1", "k3s/v1.30.14+k3s1": "v2", "kernel/5.15.0-v1": "v1"}
	releaseOf := func(c, v string) string { return markers[c+"/"+v] }
	for _, tc := range []struct {
		name    string
		moves   Components
		running Versions
		want    string
	}{
		{"k3s of the release", Components{Rootfs: true, K3s: true}, Versions{Rootfs: "v2", K3s: "v1.30.14+k3s1"}, ""},
		{"k3s left behind", Components{Rootfs: true, K3s: true}, Versions{Rootfs: "v2", K3s: "v1.23.17+k3s1"}, "k3s v1.23.17+k3s1 is release v1's"},
		{"k3s not moved by the channel", Components{Rootfs: true}, Versions{Rootfs: "v2", K3s: "v1.23.17+k3s1"}, ""},
		{"k3s without a marker (installed by k3os)", Components{Rootfs: true, K3s: true}, Versions{Rootfs: "v2", K3s: "v1.22.2+k3s2"}, ""},
		{"no k3s known", Components{Rootfs: true, K3s: true}, Versions{Rootfs: "v2"}, ""},
		{"an unchanged kernel is not judged", Components{Rootfs: true, Kernel: true}, Versions{Rootfs: "v2", Kernel: "5.15.0-v1"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ComponentsBehind(tc.moves, tc.running, releaseOf); got != tc.want {
				t.Errorf("ComponentsBehind = %q, want %q", got, tc.want)
			}
		})
	}
}

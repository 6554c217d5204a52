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

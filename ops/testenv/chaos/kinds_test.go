package chaos

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/faults"
	"slipway.dev/slipway/upgrade/layout"
)

// TestSystemKinds: each system's seeds draw only the kinds that apply to
// it (no release-source or host fault outside k3os), --kinds narrows them,
// and asking only for kinds of another system is refused with its kinds.
func TestSystemKinds(t *testing.T) {
	systems := map[string]system{"k3os": &k3os{}, "update-operator": &updateOperator{}, "eds": &edsSystem{}, "swarm": &swarmSystem{}}
	for _, name := range Systems {
		if _, ok := SystemKinds[name]; !ok {
			t.Errorf("system %s declares no fault kinds", name)
		}
	}
	for _, tc := range []struct {
		system  string
		asked   []faults.Kind
		want    []faults.Kind // every kind drawn is one of these
		never   []faults.Kind
		wantErr string
	}{
		{system: "k3os", want: faults.AllKinds},
		{system: "update-operator", want: SystemKinds["update-operator"],
			never: []faults.Kind{faults.PowerCut, faults.FullDisk, faults.SlowSource, faults.FailSource, faults.CorruptSource, faults.SlowWrites}},
		{system: "eds", want: SystemKinds["eds"],
			never: []faults.Kind{faults.PowerCut, faults.FullDisk, faults.SlowSource, faults.BlockEviction, faults.StallReboot, faults.SlowWrites}},
		{system: "swarm", want: SystemKinds["swarm"],
			never: []faults.Kind{faults.PowerCut, faults.SlowSource, faults.Reregister, faults.StallReboot, faults.SlowWrites}},
		{system: "update-operator", asked: []faults.Kind{faults.Kill, faults.PowerCut}, want: []faults.Kind{faults.Kill}},
		{system: "swarm", asked: []faults.Kind{faults.Kill, faults.BlockEviction}, want: []faults.Kind{faults.Kill}},
		{system: "update-operator", asked: []faults.Kind{faults.PowerCut, faults.SlowSource}, wantErr: "none of the kinds asked (power-cut,slow-source) is a fault of update-operator: its kinds are kill,"},
		{system: "eds", asked: []faults.Kind{faults.StallReboot}, wantErr: "is a fault of eds"},
	} {
		t.Run(tc.system+"/"+joinKinds(tc.asked), func(t *testing.T) {
			seen := map[faults.Kind]int{}
			for seed := int64(1); seed <= 40; seed++ {
				o := Options{System: tc.system, Seed: seed, Kinds: tc.asked}.withDefaults()
				sched, err := drawSchedule(o, systems[tc.system], NodeNames(o.Nodes))
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range sched {
					if !slices.Contains(tc.want, f.Kind) || slices.Contains(tc.never, f.Kind) {
						t.Fatalf("seed %d drew %q for %s", seed, f, tc.system)
					}
					seen[f.Kind]++
				}
			}
			for _, k := range tc.want { // 40 one-minute seeds draw every kind of the system
				if seen[k] == 0 {
					t.Errorf("%s: 40 seeds never drew %s (drawn: %v)", tc.system, k, seen)
				}
			}
		})
	}
}

// TestNamedSchedulesFitTheirSystem: a named schedule holds only faults of
// its own system, and a schedule with another system's fault is refused.
func TestNamedSchedulesFitTheirSystem(t *testing.T) {
	for name, n := range Schedules {
		if err := checkSchedule(n.System, n.Schedule); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := faults.Schedule{{At: 0, Kind: faults.SlowSource, Target: "source", For: time.Second, Arg: time.Second}}
	if err := checkSchedule("update-operator", bad); err == nil || !strings.Contains(err.Error(), "not a fault of update-operator") {
		t.Errorf("an update-operator schedule with slow-source: err = %v", err)
	}
}

// striker arms power cuts; each heal (the cut disarmed) reports that it
// struck when strike is set, as Sim.Fired counts the cuts.
type striker struct {
	strike bool
	fired  atomic.Int64
}

func (s *striker) Inject(_ context.Context, f faults.Fault) (func(context.Context) error, error) {
	if f.Kind != faults.PowerCut {
		return nil, nil
	}
	return func(context.Context) error {
		if s.strike {
			s.fired.Store(1) // one of the two struck
		}
		return nil
	}, nil
}

func (s *striker) Fired() map[faults.Kind]int {
	return map[faults.Kind]int{faults.PowerCut: int(s.fired.Load())}
}

// TestArmedFaultCountsWhenItStruck: a power cut is injected only when it
// struck; one that nothing reached is only armed.
func TestArmedFaultCountsWhenItStruck(t *testing.T) {
	sched := faults.Schedule{
		{At: 0, Kind: faults.PowerCut, Target: "node/node-1", For: 10 * time.Millisecond, Step: "staged"},
		{At: 0, Kind: faults.PowerCut, Target: "node/node-2", For: 10 * time.Millisecond, Step: "staged"},
		{At: 0, Kind: faults.Kill, Target: "agent/node-3"},
	}
	for _, tc := range []struct {
		strike bool
		want   int
	}{{false, 0}, {true, 1}} {
		rep := faults.Run(context.Background(), sched, &striker{strike: tc.strike}, nil)
		if rep.Injected[faults.PowerCut] != tc.want || rep.Armed[faults.PowerCut] != 2 || rep.Injected[faults.Kill] != 1 {
			t.Errorf("strike %t: injected %v, armed %v; want power-cut injected %d, armed 2, kill 1", tc.strike, rep.Injected, rep.Armed, tc.want)
		}
	}
}

// TestRestored: a wave's node is back only when its last boot and its next
// one are both the previous version, rootfs and kernel.
func TestRestored(t *testing.T) {
	for _, tc := range []struct {
		name, boots string
		next        [2]string // rootfs, kernel links
		want        string    // "" back; else part of the message
	}{
		{"back on v1", "1 rootfs=v1 kernel=5.15.0-v1\n2 rootfs=v2 kernel=5.15.0-v2\n3 rootfs=v1 kernel=5.15.0-v1\n", [2]string{"v1", "5.15.0-v1"}, ""},
		{"still booted v2", "1 rootfs=v1 kernel=5.15.0-v1\n2 rootfs=v2 kernel=5.15.0-v2\n", [2]string{"v1", "5.15.0-v1"}, "booted rootfs v2 kernel 5.15.0-v2 after its wave's rollback, not its previous v1"},
		{"half back", "3 rootfs=v1 kernel=5.15.0-v2\n", [2]string{"v1", "5.15.0-v1"}, "booted rootfs v1 kernel 5.15.0-v2"},
		{"v2 linked to boot next", "3 rootfs=v1 kernel=5.15.0-v1\n", [2]string{"v2", "5.15.0-v2"}, "would boot rootfs v2 kernel 5.15.0-v2 next"},
		{"never booted", "", [2]string{"v1", "5.15.0-v1"}, "never booted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := layout.New(filepath.Join(dir, testenv.K3osSystemDir))
			for c, v := range map[layout.Component]string{layout.Rootfs: tc.next[0], layout.Kernel: tc.next[1]} {
				if err := os.MkdirAll(l.VersionDir(c, v), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := l.SetLink(c, layout.CurrentLink, v); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, testenv.BootsLog), []byte(tc.boots), 0o644); err != nil {
				t.Fatal(err)
			}
			got := restored(dir, "node-1", "v1")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("restored = %q, want %q", got, tc.want)
			}
		})
	}
}

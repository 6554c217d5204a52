package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/testenv/chaos"
	"slipway.dev/slipway/ops/testenv/faults"
)

func TestChaosNamedRunsOnItsOwnSystem(t *testing.T) {
	for _, tc := range []struct {
		system, named string
		want          []string
		header        string
	}{
		{system: "k3os", named: "eds-refused-restore", want: []string{"eds"}, header: "chaos eds: 1 runs of schedule eds-refused-restore"},
		{system: "all", named: "uo-release-fails-everywhere", want: []string{"update-operator"},
			header: "chaos update-operator: 1 runs of schedule uo-release-fails-everywhere"},
		{system: "swarm", want: []string{"swarm"}, header: "chaos swarm: 1 seeds (7..7)"},
		{system: "all", want: chaos.Systems, header: "chaos k3os: 1 seeds (7..7)"},
	} {
		systems, named, err := chaosSystems(tc.system, tc.named)
		if err != nil {
			t.Fatalf("--system %s --named %q: %v", tc.system, tc.named, err)
		}
		if !slices.Equal(systems, tc.want) {
			t.Errorf("--system %s --named %q runs %v, want %v", tc.system, tc.named, systems, tc.want)
		}
		if got := runsHeader(systems[0], named, 1, 7); got != tc.header {
			t.Errorf("--system %s --named %q: summary %q, want %q", tc.system, tc.named, got, tc.header)
		}
	}
	for _, bad := range []struct{ system, named, want string }{
		{"k3os", "no-such-schedule", "no schedule named"},
		{"kubelet", "", "unknown system"},
	} {
		if _, _, err := chaosSystems(bad.system, bad.named); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--system %s --named %q: error %v, want one saying %q", bad.system, bad.named, err, bad.want)
		}
	}
}

// TestChaosReplayScheduleFile: a run of --schedule FILE prints a replay
// command that runs that file again: the same system, seed, nodes and
// schedule, the file by its absolute path (scripts/chaos runs from the
// repository's root).
func TestChaosReplayScheduleFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	sched := faults.Schedule{{At: time.Second, Kind: faults.Kill, Target: "agent/node-2"}, {At: 2 * time.Second, Kind: faults.NotReady, Target: "node/node-3", For: 5 * time.Second}}
	if err := os.WriteFile("sched.txt", []byte(sched.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := parseChaos([]string{"--bin", dir, "--system", "k3os", "--seed", "42", "--nodes", "4", "--schedule", "sched.txt"})
	if err != nil {
		t.Fatal(err)
	}
	o := p.options("k3os", 0)
	if o.ScheduleFile != filepath.Join(dir, "sched.txt") || len(o.Schedule) != 2 || o.Name != "" {
		t.Fatalf("options: file %q, %d faults, name %q", o.ScheduleFile, len(o.Schedule), o.Name)
	}
	res := chaos.Result{System: o.System, Seed: o.Seed, Name: o.Name, ScheduleFile: o.ScheduleFile, Nodes: o.Nodes, Duration: o.Duration}
	replay := res.Replay()
	args, ok := strings.CutPrefix(replay, "scripts/chaos ")
	if !ok || !strings.Contains(replay, "--schedule "+filepath.Join(dir, "sched.txt")) {
		t.Fatalf("replay %q", replay)
	}
	// scripts/chaos puts its own flags first; the replay's win.
	t.Chdir(t.TempDir())
	again, err := parseChaos(append([]string{"--bin", dir, "--seeds", "2", "--duration", "45s", "--system", "all"}, strings.Fields(args)...))
	if err != nil {
		t.Fatalf("replay %q: %v", replay, err)
	}
	o2 := again.options(again.systems[0], 0)
	if !slices.Equal(again.systems, []string{"k3os"}) || again.seeds != 1 || o2.Seed != 42 || o2.Nodes != 4 || o2.ScheduleFile != o.ScheduleFile ||
		o2.Schedule.String() != o.Schedule.String() {
		t.Fatalf("replay %q runs %v x%d seed %d nodes %d file %q schedule\n%s\nwant k3os x1 seed 42 nodes 4 file %q schedule\n%s",
			replay, again.systems, again.seeds, o2.Seed, o2.Nodes, o2.ScheduleFile, o2.Schedule, o.ScheduleFile, o.Schedule)
	}
	if _, err := parseChaos([]string{"--bin", dir, "--schedule", filepath.Join(dir, "sched.txt"), "--named", "eds-refused-restore"}); err == nil {
		t.Error("--schedule with --named accepted")
	}
}

// TestChaosListNamed: --list-named lists every named schedule once, with
// its system, grouped by system in chaos.Systems order (scripts/chaos
// runs them from this list).
func TestChaosListNamed(t *testing.T) {
	p, err := parseChaos([]string{"--list-named"})
	if err != nil || !p.list {
		t.Fatalf("--list-named: %v, list %t", err, p.list)
	}
	lines := strings.Split(strings.TrimSpace(namedList()), "\n")
	if len(lines) != len(chaos.Schedules) {
		t.Fatalf("%d lines for %d named schedules:\n%s", len(lines), len(chaos.Schedules), namedList())
	}
	last := 0
	for _, l := range lines {
		name, sys, ok := strings.Cut(l, " ")
		n, known := chaos.Schedules[name]
		if !ok || !known || n.System != sys {
			t.Fatalf("line %q: not a named schedule and its system", l)
		}
		r := slices.Index(chaos.Systems, sys)
		if r < last {
			t.Fatalf("line %q: system out of order", l)
		}
		last = r
	}
}

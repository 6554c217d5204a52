package main

import (
	"slices"
	"strings"
	"testing"

	"slipway.dev/slipway/ops/testenv/chaos"
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

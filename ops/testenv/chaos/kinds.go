package chaos

import (
	"fmt"
	"slices"
	"strings"

	"slipway.dev/slipway/ops/testenv/faults"
)

// SystemKinds are the kinds of faults that apply to each system: a run
// draws only these, and refuses a schedule with another. The host faults
// (power-cut, full-disk) hit the k3os host upgrade (`slipway ops upgrade`
// on the simulated hosts), and the release-source faults the k3os
// channel's http source: no other system has either. The update operator
// drains and reboots (block-eviction, stall-reboot); the ExtendedDaemonSet
// and the swarm neither drain nor reboot, and the swarm's workers keep
// their pods when a Node is deleted (no reregister). A clock step hits the
// k3os and update-operator agents and controllers (the processes that read
// the wall clock through ops/internal/wallclock). Held writes
// (slow-writes) hit the k3os controllers' writes of the nodes' views.
var SystemKinds = map[string][]faults.Kind{
	"k3os": faults.AllKinds,
	"update-operator": {faults.Kill, faults.Pause, faults.Latency, faults.HalfOpen, faults.Partition, faults.Drop,
		faults.NotReady, faults.Reregister, faults.BlockEviction, faults.StallReboot, faults.ClockStep},
	"eds": {faults.Kill, faults.Pause, faults.Latency, faults.HalfOpen, faults.Partition, faults.Drop,
		faults.NotReady, faults.Reregister},
	"swarm": {faults.Kill, faults.Pause, faults.Latency, faults.HalfOpen, faults.Partition, faults.Drop,
		faults.NotReady},
}

// drawnKinds are the kinds a run of system draws: its own kinds, only
// those of asked when asked is set. Asking for kinds none of which apply
// to the system is an error that says which do.
func drawnKinds(system string, asked []faults.Kind) ([]faults.Kind, error) {
	own, ok := SystemKinds[system]
	if !ok {
		return nil, fmt.Errorf("chaos: unknown system %q (known: %s)", system, strings.Join(Systems, ", "))
	}
	if len(asked) == 0 {
		return own, nil
	}
	var out []faults.Kind
	for _, k := range own {
		if slices.Contains(asked, k) {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("chaos: none of the kinds asked (%s) is a fault of %s: its kinds are %s", joinKinds(asked), system, joinKinds(own))
	}
	return out, nil
}

// drawSchedule is the schedule o's seed draws for sys: only the system's
// kinds (and of those, o.Kinds when set).
func drawSchedule(o Options, sys system, nodes []string) (faults.Schedule, error) {
	kinds, err := drawnKinds(o.System, o.Kinds)
	if err != nil {
		return nil, err
	}
	spec := sys.spec(o, nodes)
	restrictSpec(&spec, kinds)
	return faults.Generate(o.Seed, spec), nil
}

// restrictSpec leaves in spec only the kinds of kinds: the others get no
// weight and no target, so that Generate never draws them.
func restrictSpec(spec *faults.Spec, kinds []faults.Kind) {
	for k := range spec.Targets {
		if !slices.Contains(kinds, k) {
			delete(spec.Targets, k)
		}
	}
	for k := range spec.Weights {
		if !slices.Contains(kinds, k) {
			spec.Weights[k] = 0
		}
	}
}

// checkSchedule refuses a schedule (named, or read from a file) with a
// fault that does not apply to system: it would fail, or count as
// injected while nothing was hit.
func checkSchedule(system string, sched faults.Schedule) error {
	own := SystemKinds[system]
	for _, f := range sched {
		if !slices.Contains(own, f.Kind) {
			return fmt.Errorf("chaos: the schedule's fault %q is not a fault of %s: its kinds are %s", f, system, joinKinds(own))
		}
	}
	return nil
}

func joinKinds(ks []faults.Kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ",")
}

package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/chaos"
	"slipway.dev/slipway/ops/testenv/faults"
)

// chaosPlan is a chaos command's runs, as its flags say.
type chaosPlan struct {
	systems  []string
	named    *chaos.Options // --named: that schedule's options
	sched    faults.Schedule
	file     string // --schedule, absolute
	only     []faults.Kind
	seed     int64
	seeds    int
	duration time.Duration
	settle   time.Duration
	nodes    int
	bin      string
	tools    string
	keep     bool
	verbose  bool
	list     bool // --list-named
}

// parseChaos reads a chaos command's flags.
func parseChaos(args []string) (chaosPlan, error) {
	var p chaosPlan
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	system := fs.String("system", "k3os", "system to run ("+strings.Join(chaos.Systems, ", ")+"), or all")
	fs.IntVar(&p.seeds, "seeds", 1, "number of seeds per system")
	fs.Int64Var(&p.seed, "seed", 0, "first seed (0: drawn from the clock and printed)")
	fs.DurationVar(&p.duration, "duration", time.Minute, "span of each run's faults")
	fs.DurationVar(&p.settle, "settle", 3*time.Minute, "how long a run may take to settle after its faults")
	fs.IntVar(&p.nodes, "nodes", 5, "fake nodes per run")
	fs.StringVar(&p.bin, "bin", "", "directory holding the built slipway and slipway-sim (required)")
	fs.StringVar(&p.tools, "tools", os.Getenv(testenv.EnvToolsDir), "directory of the control-plane binaries (default $SLIPWAY_TOOLS_DIR)")
	schedule := fs.String("schedule", "", "run this schedule file (faults.Parse format) instead of drawing one from the seed")
	named := fs.String("named", "", "run this named schedule (ops/testenv/chaos Schedules) instead of seeds, on its own system (--system is ignored)")
	kinds := fs.String("kinds", "", "comma-separated kinds of faults to draw (default all: "+kindList()+")")
	fs.BoolVar(&p.keep, "keep", false, "keep every run's directory (logs, violations.jsonl); failing runs' are always kept")
	fs.BoolVar(&p.verbose, "v", false, "print each fault as it is applied and healed")
	fs.BoolVar(&p.list, "list-named", false, "print the named schedules, one a line (name, then system), and run nothing")
	if err := fs.Parse(args); err != nil {
		return p, err
	}
	if p.list {
		return p, nil
	}
	if p.bin == "" {
		return p, fmt.Errorf("chaos: --bin is required (a directory with slipway and slipway-sim built, as scripts/chaos does)")
	}
	var err error
	if p.systems, p.named, err = chaosSystems(*system, *named); err != nil {
		return p, err
	}
	if *schedule != "" {
		if *named != "" {
			return p, fmt.Errorf("chaos: --schedule and --named both given: run one (a named schedule has its own faults)")
		}
		if p.file, err = filepath.Abs(*schedule); err != nil { // the replay command runs from the repository's root
			return p, fmt.Errorf("chaos: --schedule: %w", err)
		}
		b, err := os.ReadFile(p.file)
		if err != nil {
			return p, fmt.Errorf("chaos: --schedule: %w", err)
		}
		if p.sched, err = faults.Parse(string(b)); err != nil {
			return p, fmt.Errorf("chaos: --schedule %s: %w", *schedule, err)
		}
	}
	for _, k := range strings.Split(*kinds, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if !slices.Contains(faults.AllKinds, faults.Kind(k)) {
			return p, fmt.Errorf("chaos: --kinds: unknown kind %q (known: %s)", k, kindList())
		}
		p.only = append(p.only, faults.Kind(k))
	}
	if p.seed == 0 {
		p.seed = time.Now().UnixNano() % 1_000_000
	}
	return p, nil
}

// options are the chaos.Options of system sys's i-th run.
func (p chaosPlan) options(sys string, i int) chaos.Options {
	o := chaos.Options{System: sys, Seed: p.seed + int64(i), Duration: p.duration, Settle: p.settle, Nodes: p.nodes, Bin: p.bin,
		ToolsDir: p.tools, Schedule: p.sched, ScheduleFile: p.file, Keep: p.keep, Kinds: p.only}
	if p.named != nil {
		n := *p.named
		n.Bin, n.ToolsDir, n.Keep, n.Settle = p.bin, p.tools, p.keep, p.settle
		o = n
	}
	if p.verbose {
		o.Log = os.Stdout
	}
	return o
}

// chaosCmd runs systems under seeded faults with the monitor watching and
// prints, per system, the seeds, faults by kind, checks and violations;
// each failing run prints its schedule and the command that replays it.
func chaosCmd(ctx context.Context, args []string) error {
	p, err := parseChaos(args)
	if err != nil {
		return err
	}
	if p.list {
		fmt.Print(namedList())
		return nil
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	failed := 0
	for _, sys := range p.systems {
		if len(p.systems) > 1 && len(p.only) > 0 && !slices.ContainsFunc(p.only, func(k faults.Kind) bool { return slices.Contains(chaos.SystemKinds[sys], k) }) {
			fmt.Printf("chaos %s: skipped: none of --kinds is a fault of %s (its kinds: %s)\n", sys, sys, kindsOf(chaos.SystemKinds[sys]))
			continue
		}
		var total chaos.Result
		total.Faults = faults.Report{Injected: map[faults.Kind]int{}, Skipped: map[faults.Kind]int{}}
		start := time.Now()
		runs, bad := 0, 0
		for i := range p.seeds {
			o := p.options(sys, i)
			res, err := chaos.Run(ctx, o)
			if err != nil {
				return fmt.Errorf("chaos: %s seed %d: %w", sys, o.Seed, err)
			}
			res.Report(os.Stdout)
			runs++
			if res.Failed() {
				bad++
			}
			for k, n := range res.Faults.Injected {
				total.Faults.Injected[k] += n
			}
			for k, n := range res.Faults.Skipped {
				total.Faults.Skipped[k] += n
			}
			total.Faults.FaultTime += res.Faults.FaultTime
			total.Checks += res.Checks
			total.Violations = append(total.Violations, res.Violations...)
		}
		fmt.Printf("%s in %s, %d failed: faults %s, %.1f fault-minutes, %d invariant checks, %d violations\n",
			runsHeader(sys, p.named, runs, p.seed), time.Since(start).Round(time.Second), bad, summary(total.Faults.Injected),
			total.Faults.FaultTime.Minutes(), total.Checks, len(total.Violations))
		failed += bad
	}
	if failed > 0 {
		return fmt.Errorf("chaos: %d runs failed (their replay commands are above)", failed)
	}
	return nil
}

// namedList is every named schedule, one a line: its name and system,
// by system (in chaos.Systems order) then name.
func namedList() string {
	names := slices.Collect(maps.Keys(chaos.Schedules))
	rank := func(n string) int { return slices.Index(chaos.Systems, chaos.Schedules[n].System) }
	slices.SortFunc(names, func(a, b string) int {
		if c := rank(a) - rank(b); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s %s\n", n, chaos.Schedules[n].System)
	}
	return b.String()
}

// chaosSystems is what a chaos command runs: a named schedule on its own
// system, whatever --system says (with its options); else the system
// --system names, or every system for "all".
func chaosSystems(system, named string) ([]string, *chaos.Options, error) {
	if named != "" {
		n, err := chaos.NamedOptions(named)
		if err != nil {
			return nil, nil, err
		}
		return []string{n.System}, &n, nil
	}
	if system == "all" {
		return chaos.Systems, nil, nil
	}
	if !slices.Contains(chaos.Systems, system) {
		return nil, nil, fmt.Errorf("chaos: --system: unknown system %q (known: %s, or all)", system, strings.Join(chaos.Systems, ", "))
	}
	return []string{system}, nil, nil
}

// runsHeader begins a system's summary line: its runs of a named schedule,
// or its seeds from the first.
func runsHeader(sys string, named *chaos.Options, runs int, seed int64) string {
	if named != nil {
		return fmt.Sprintf("chaos %s: %d runs of schedule %s", sys, runs, named.Name)
	}
	return fmt.Sprintf("chaos %s: %d seeds (%d..%d)", sys, runs, seed, seed+int64(runs)-1)
}

func kindList() string { return kindsOf(faults.AllKinds) }

func kindsOf(kinds []faults.Kind) string {
	var ks []string
	for _, k := range kinds {
		ks = append(ks, string(k))
	}
	return strings.Join(ks, ",")
}

func summary(m map[faults.Kind]int) string {
	s, n := "", 0
	for _, k := range faults.AllKinds {
		if m[k] > 0 {
			s += fmt.Sprintf(" %s=%d", k, m[k])
			n += m[k]
		}
	}
	return fmt.Sprintf("%d (%s)", n, trim(s))
}

func trim(s string) string {
	if len(s) > 0 && s[0] == ' ' {
		return s[1:]
	}
	return s
}

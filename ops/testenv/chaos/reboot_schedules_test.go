package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/faults"
)

// TestRebootSchedules runs the schedules of nodes rebooting by themselves
// (SLIPWAY_CHAOS_NAMED=1, as the other named schedules): each must pass
// under the monitor and the host checks, every armed reboot must strike,
// and no node may reboot more than its slot allows beside its own reboots
// (rebootsPerSlot).
func TestRebootSchedules(t *testing.T) {
	needCluster(t)
	if os.Getenv(envNamed) != "1" {
		t.Skipf("%s=1 runs the named schedules", envNamed)
	}
	t.Parallel()
	bin := buildBin(t)
	for _, name := range rebootNamed {
		t.Run(name, func(t *testing.T) { runReboots(t, bin, name) })
	}
}

// TestSelfRebootAfterSwapShort is make test's reboot of a node by itself:
// the first slots' nodes reboot right after their swap (every node armed
// for 30 s); none may be drained and rebooted a second time, and the
// rollout ends at v2.
func TestSelfRebootAfterSwapShort(t *testing.T) {
	needCluster(t)
	t.Parallel()
	runReboots(t, buildBin(t), "k3os-self-reboot-after-swap-short")
}

// runReboots runs the named schedule, keeping its directory for the
// nodes' files, and checks what rebootsPerSlot checks.
func runReboots(t *testing.T, bin, name string) {
	o, res, log := runNamedKept(t, bin, name)
	t.Logf("%s: %d reboots of their own", name, len(res.Faults.Strikes))
	rule := rebootRules[name]
	if bad, err := rebootsPerSlot(nodesRoot(res.Dir), NodeNames(o.Nodes), rule.afterSwap); err != nil {
		t.Fatal(err)
	} else if len(bad) > 0 {
		t.Log(log.String())
		t.Errorf("a node rebooted beyond its slot (logs in %s):\n  %s", res.Dir, strings.Join(bad, "\n  "))
	}
	if rule.bootsWhatRan {
		if bad, err := ownRebootsBootWhatRan(nodesRoot(res.Dir), NodeNames(o.Nodes)); err != nil {
			t.Fatal(err)
		} else if len(bad) > 0 {
			t.Log(log.String())
			t.Errorf("a node's own reboot booted another release than it ran (logs in %s):\n  %s", res.Dir, strings.Join(bad, "\n  "))
		}
	}
	if res.Failed() {
		t.Log(log.String())
		t.Fatalf("failed: replay with %s", res.Replay())
	}
	if got, want := res.Faults.Injected[faults.Reboot], o.Schedule.Counts()[faults.Reboot]; got == 0 || rule.allStrike && got != want {
		t.Fatalf("%d reboots struck of %d (armed %v): an armed step no upgrade reached proves nothing", got, want, res.Faults.Armed)
	}
	if rule.afterSwap && !strings.Contains(res.Outcome, fmt.Sprintf("%d/%d nodes at v2, 0 failures", o.Nodes, o.Nodes)) {
		t.Fatalf("outcome %q: want every node at v2 with no failure", res.Outcome)
	}
}

// TestRebootsPerSlot: a node's reboots beyond its own are at most one
// (its slot's), none once it rebooted by itself after its swap.
func TestRebootsPerSlot(t *testing.T) {
	root := t.TempDir()
	write := func(node, boots string, own int) {
		dir := filepath.Join(root, node)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, testenv.BootsLog), []byte(boots), 0o644); err != nil {
			t.Fatal(err)
		}
		if own > 0 {
			if err := os.WriteFile(filepath.Join(dir, faults.InjectedRebootsFile), []byte(strings.Repeat("1 boot\n", own)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	v1, v2 := "rootfs=v1 kernel=5.15.0-v1\n", "rootfs=v2 kernel=5.15.0-v2\n"
	write("planned", "1 "+v1+"2 "+v2, 0)               // slipway's one reboot
	write("own", "1 "+v1+"2 "+v2, 1)                   // its own, after the swap
	write("twice", "1 "+v1+"2 "+v2+"3 "+v2, 1)         // its own, then slipway's again
	write("planned-twice", "1 "+v1+"2 "+v2+"3 "+v2, 0) // two of slipway's
	for _, tc := range []struct {
		ownAfterSwap bool
		want         []string
	}{{true, []string{"twice", "planned-twice"}}, {false, []string{"planned-twice"}}} {
		bad, err := rebootsPerSlot(root, []string{"planned", "own", "twice", "planned-twice"}, tc.ownAfterSwap)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, b := range bad {
			got = append(got, strings.Fields(b)[0])
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("ownAfterSwap %t: %v, want %v", tc.ownAfterSwap, bad, tc.want)
		}
	}
}

// TestOwnRebootsBootWhatRan: a node's own reboot boots the release of
// the boot before it; one that boots another (a swap left in place) is
// reported.
func TestOwnRebootsBootWhatRan(t *testing.T) {
	root := t.TempDir()
	v1, v2 := "rootfs=v1 kernel=5.15.0-v1\n", "rootfs=v2 kernel=5.15.0-v2\n"
	for node, files := range map[string][2]string{
		"kept":    {"1 " + v1 + "2 " + v1, "1 b 2 slot=false\n"},
		"swapped": {"1 " + v1 + "2 " + v2, "1 b 2 slot=false\n"},
		"later":   {"1 " + v1 + "2 " + v2 + "3 " + v2, "1 b 3 slot=false\n"}, // slipway's reboot into v2, then its own
		"in-slot": {"1 " + v1 + "2 " + v2, "1 b 2 slot=true\n"},              // its own after its swap, in its slot
		"none":    {"1 " + v1 + "2 " + v2, ""},
	} {
		dir := filepath.Join(root, node)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, testenv.BootsLog), []byte(files[0]), 0o644); err != nil {
			t.Fatal(err)
		}
		if files[1] != "" {
			if err := os.WriteFile(filepath.Join(dir, faults.InjectedRebootsFile), []byte(files[1]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	bad, err := ownRebootsBootWhatRan(root, []string{"kept", "swapped", "later", "none", "in-slot"})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 1 || !strings.HasPrefix(bad[0], "swapped: its own reboot booted rootfs v2") {
		t.Fatalf("got %q, want swapped's reboot alone", bad)
	}
}

// runNamedKept runs the named schedule name with its run directory kept,
// logs its report, and removes the directory once the test passed (unless
// SLIPWAY_CHAOS_KEEP=1: kept for a look at the nodes' logs). A run that
// could not be made fails the test; a failed verdict is the caller's to
// judge, after its own checks of the nodes' files.
func runNamedKept(t *testing.T, bin, name string) (Options, Result, *bytes.Buffer) {
	t.Helper()
	o, err := NamedOptions(name)
	if err != nil {
		t.Fatal(err)
	}
	log := &bytes.Buffer{}
	o.Bin, o.ToolsDir, o.Log, o.Keep = bin, os.Getenv(testenv.EnvToolsDir), log, true
	start := time.Now()
	res, err := Run(context.Background(), o)
	if res.Dir != "" {
		t.Cleanup(func() {
			if !t.Failed() && os.Getenv("SLIPWAY_CHAOS_KEEP") != "1" {
				_ = os.RemoveAll(res.Dir)
			}
		})
	}
	var rep bytes.Buffer
	res.Report(&rep)
	t.Log(rep.String())
	if err != nil {
		t.Log(log.String())
		t.Fatal(err)
	}
	t.Logf("%s: %s", name, time.Since(start).Round(time.Second))
	if testing.Verbose() {
		t.Log(log.String())
	}
	return o, res, log
}

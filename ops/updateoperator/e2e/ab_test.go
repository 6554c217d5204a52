package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"slipway.dev/slipway/ops/kube"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// contender is one build of slipway the benchmark runs its rounds with:
// this tree's, and with SLIPWAY_UO_BENCH_BASE=<a slipway binary> (e.g.
// built from the commit before a change) that one as well. Each round
// then runs once with each, on the same cluster, the order flipped from
// one round to the next, so both meet the same settings and, on average,
// the same load.
type contender struct{ name, bin string }

func contenders() []contender {
	this := contender{"this tree", filepath.Join(bin, "slipway")}
	base := os.Getenv("SLIPWAY_UO_BENCH_BASE")
	if base == "" {
		return []contender{this}
	}
	return []contender{{"base", base}, this}
}

// controllerBin is the slipway binary the controller runs.
var controllerBin string

// useBin makes path the binary the agents start (shared/agent-bin, read by
// each agent's command when it starts) and the controller runs.
func useBin(path string) error {
	controllerBin = path
	return os.WriteFile(filepath.Join(shared, "agent-bin"), []byte(path+"\n"), 0o644)
}

// switchTo restarts every agent with ct's binary (a crash-and-restart of
// each node's command, no reboot) and waits until each runs it and has
// checked in, then lets the machine settle.
func switchTo(b *testing.B, c *kube.Clientset, ct contender) {
	if err := useBin(ct.bin); err != nil {
		b.Fatal(err)
	}
	for _, name := range env.Nodes[:agents] {
		if _, err := env.Crash(name); err != nil {
			b.Fatalf("restart the agent of %s: %v", name, err)
		}
	}
	waitAll(b, c, 2*time.Minute, "every agent restarted and up to date", func(n *corev1.Node) bool {
		return n.Labels[keys.Exclude()] == "true" || n.Annotations[keys.State()] == string(uo.StateUpToDate)
	})
	time.Sleep(10 * time.Second) // 100 process starts: let the machine settle before the timed round
}

// order is the contenders of round i: flipped every other round.
func order(i int) []contender {
	cts := contenders()
	if i%2 == 1 {
		for l, r := 0, len(cts)-1; l < r; l, r = l+1, r-1 {
			cts[l], cts[r] = cts[r], cts[l]
		}
	}
	return cts
}

// result is what one round measured, for the summary of the contenders.
type result struct {
	contender, tag             string
	wall, overhead, own, trips float64
	load                       string
}

// summarize logs, per round shape and contender, the median of each figure.
func summarize(b *testing.B, results []result) {
	if len(contenders()) < 2 {
		return
	}
	type key struct{ tag, contender string }
	by := map[key][]result{}
	var keys []key
	for _, r := range results {
		k := key{r.tag, r.contender}
		if by[k] == nil {
			keys = append(keys, k)
		}
		by[k] = append(by[k], r)
	}
	sort.SliceStable(keys, func(i, j int) bool { return keys[i].tag < keys[j].tag })
	med := func(rs []result, f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	for _, k := range keys {
		rs := by[k]
		var loads []string
		for _, r := range rs {
			loads = append(loads, r.load)
		}
		b.Logf("summary %s, %s (%d rounds, median): wall %.1f s, overhead per node %.2f s, the operator's own %.2f s, round trips per node %.1f; load averages %s",
			k.tag[1:], k.contender, len(rs), med(rs, func(r result) float64 { return r.wall }), med(rs, func(r result) float64 { return r.overhead }),
			med(rs, func(r result) float64 { return r.own }), med(rs, func(r result) float64 { return r.trips }), strings.Join(loads, " / "))
	}
}

// loadAvg is the machine's 1-minute load average.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	return fmt.Sprint(strings.Fields(string(data))[0])
}

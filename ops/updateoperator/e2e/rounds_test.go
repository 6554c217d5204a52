package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/kube"
)

// roundSpec is one round of the benchmark.
type roundSpec struct {
	conc          int
	prepare, down time.Duration // the host's fixed prepare time, a reboot's downtime
	apply         time.Duration // the host's fixed perform-update time (0: a file copy)
	ahead         bool          // --prepare-ahead
	nodes         int           // update only the first this many (0: all); the others are excluded
}

// defaultRounds keep `make bench` near eleven minutes on 100 nodes: the 5 s
// host time of the earlier figures, once more with a perform-update of 1 s
// (a host's activation: the drain runs beside it), and the UpdateChannel
// benchmark's 20 s (its upgrade 5 s; rebootDelay 5 s + reboot 10 s as our
// downtime), each plain and with --prepare-ahead, at max-concurrent 10;
// max-concurrent 1 through 10 nodes (100 would take nine minutes alone).
const defaultRounds = "10/2s/3s,10/2s/3s/apply=1s,10/2s/3s/ahead,10/5s/15s,10/5s/15s/ahead,1/2s/3s/n=10"

// rounds reads SLIPWAY_UO_BENCH_ROUNDS (comma-separated
// conc/prepare/reboot[/ahead][/n=N][/apply=D]; apply=D gives perform-update a
// fixed time of its own, as a host's activation takes); without it, SLIPWAY_UO_BENCH_CONCURRENCY
// (a list of max-concurrents) with SLIPWAY_UO_BENCH_HOST_TIME and _REBOOT
// gives plain rounds, as before; without either, defaultRounds.
func rounds() ([]roundSpec, error) {
	spec := os.Getenv("SLIPWAY_UO_BENCH_ROUNDS")
	if spec == "" && os.Getenv("SLIPWAY_UO_BENCH_CONCURRENCY") != "" {
		var parts []string
		for _, c := range strings.Split(os.Getenv("SLIPWAY_UO_BENCH_CONCURRENCY"), ",") {
			parts = append(parts, fmt.Sprintf("%s/%s/%s", strings.TrimSpace(c), hostTime, downTime))
		}
		spec = strings.Join(parts, ",")
	}
	if spec == "" {
		spec = defaultRounds
	}
	var out []roundSpec
	for _, s := range strings.Split(spec, ",") {
		r, err := parseRound(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("SLIPWAY_UO_BENCH_ROUNDS: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

func parseRound(s string) (roundSpec, error) {
	f := strings.Split(s, "/")
	bad := fmt.Errorf("round %q: want conc/prepare/reboot[/ahead][/n=N][/apply=D], e.g. 10/2s/3s/ahead", s)
	if len(f) < 3 {
		return roundSpec{}, bad
	}
	var r roundSpec
	var err error
	if r.conc, err = strconv.Atoi(f[0]); err != nil || r.conc < 1 {
		return roundSpec{}, bad
	}
	if r.prepare, err = time.ParseDuration(f[1]); err != nil {
		return roundSpec{}, bad
	}
	if r.down, err = time.ParseDuration(f[2]); err != nil {
		return roundSpec{}, bad
	}
	for _, opt := range f[3:] {
		switch {
		case opt == "ahead":
			r.ahead = true
		case strings.HasPrefix(opt, "apply="):
			if r.apply, err = time.ParseDuration(opt[6:]); err != nil || r.apply < 0 {
				return roundSpec{}, bad
			}
		case strings.HasPrefix(opt, "n="):
			if r.nodes, err = strconv.Atoi(opt[2:]); err != nil || r.nodes < 1 {
				return roundSpec{}, bad
			}
		default:
			return roundSpec{}, bad
		}
	}
	return r, nil
}

func (r roundSpec) tag() string {
	t := fmt.Sprintf("-c%d-%gs", r.conc, r.host().Seconds())
	if r.apply > 0 {
		t += fmt.Sprintf("-apply%gs", r.apply.Seconds())
	}
	if r.ahead {
		t += "-ahead"
	}
	if r.nodes > 0 {
		t += fmt.Sprintf("-n%d", r.nodes)
	}
	return t
}

// ideals are the round's wall with no overhead over n nodes: plain, every
// wave prepares then reboots; overlapped, only the first wave's prepare is
// on the path (the others prepare while the wave before them reboots).
func (r roundSpec) ideals(n int) (plain, overlapped time.Duration) {
	waves := time.Duration((n + r.conc - 1) / r.conc)
	return waves * r.host(), r.prepare + waves*(r.apply+r.down)
}

// host is one node's host time: prepare, perform-update, the reboot's downtime.
func (r roundSpec) host() time.Duration { return r.prepare + r.apply + r.down }

// exclude labels every node past the round's first r.nodes exclude=true,
// and returns how many nodes the round updates.
func (r roundSpec) exclude(b testing.TB, c *kube.Clientset) int {
	if r.nodes <= 0 || r.nodes >= agents {
		return agents
	}
	for _, name := range env.Nodes[r.nodes:agents] {
		label(b, c, name, "true")
	}
	return r.nodes
}

// include lifts the round's exclusions (the idle nodes past agents stay).
func (r roundSpec) include(b testing.TB, c *kube.Clientset) {
	if r.nodes <= 0 || r.nodes >= agents {
		return
	}
	for _, name := range env.Nodes[r.nodes:agents] {
		label(b, c, name, nil)
	}
}

func label(b testing.TB, c *kube.Clientset, node string, v any) {
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{keys.Exclude(): v}}})
	if _, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		b.Fatalf("label %s: %v", node, err)
	}
}

func TestParseRounds(t *testing.T) {
	for _, s := range strings.Split(defaultRounds, ",") {
		if _, err := parseRound(s); err != nil {
			t.Errorf("default round: %v", err)
		}
	}
	r, err := parseRound("10/5s/15s/ahead/n=20")
	if err != nil || r != (roundSpec{conc: 10, prepare: 5 * time.Second, down: 15 * time.Second, ahead: true, nodes: 20}) {
		t.Errorf("parseRound = %+v, %v", r, err)
	}
	if plain, over := r.ideals(100); plain != 200*time.Second || over != 155*time.Second {
		t.Errorf("ideals(100) = %s, %s; want 200s, 155s", plain, over)
	}
	r, err = parseRound("10/2s/3s/apply=1s")
	if err != nil || r.apply != time.Second || r.tag() != "-c10-6s-apply1s" {
		t.Errorf("parseRound = %+v (tag %s), %v", r, r.tag(), err)
	}
	if plain, over := r.ideals(100); plain != 60*time.Second || over != 42*time.Second {
		t.Errorf("ideals(100) = %s, %s; want 60s, 42s (perform is in every wave)", plain, over)
	}
	for _, bad := range []string{"", "10", "0/1s/1s", "10/x/1s", "10/1s/1s/later", "10/1s/1s/n=0", "10/1s/1s/apply=x"} {
		if _, err := parseRound(bad); err == nil {
			t.Errorf("parseRound(%q): no error", bad)
		}
	}
}

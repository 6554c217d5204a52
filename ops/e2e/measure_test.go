package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"slipway.dev/slipway/ops/protocol"
)

// agentRSS returns the resident memory (KiB) of every running agent
// process, by node, read from /proc: VmRSS, and of it RssAnon (the
// process's own memory; the rest is the binary's file pages, shared by every
// process running it).
func agentRSS() map[string][2]int {
	out := map[string][2]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		node, ok := ourAgent(strings.Split(string(cmd), "\x00"))
		if !ok {
			continue
		}
		status, err := os.ReadFile(filepath.Join(d, "status"))
		if err != nil {
			continue
		}
		var v [2]int
		for _, line := range strings.Split(string(status), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			switch f[0] {
			case "VmRSS:":
				v[0], _ = strconv.Atoi(f[1])
			case "RssAnon:":
				v[1], _ = strconv.Atoi(f[1])
			}
		}
		out[node] = v
	}
	return out
}

// writes are the apiserver's write requests, from its /metrics.
type writes struct {
	all        float64 // every POST, PUT, PATCH, DELETE
	heartbeats float64 // of them: Leases (kwok's node heartbeats, the channel Lease's renewals) and node status
	conflicts  float64 // UpdateChannel status writes refused with 409
}

func scrapeWrites(ctx context.Context, c kubernetes.Interface) (writes, error) {
	body, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return writes{}, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return writes{}, err
	}
	w := writes{}
	fam := families["apiserver_request_total"]
	if fam == nil {
		return w, nil
	}
	for _, m := range fam.GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY":
		default:
			continue
		}
		v := m.GetCounter().GetValue()
		w.all += v
		if l["resource"] == "leases" || (l["resource"] == "nodes" && l["subresource"] == "status") {
			w.heartbeats += v
		}
		if l["resource"] == "updatechannels" && l["subresource"] == "status" && l["code"] == "409" {
			w.conflicts += v
		}
	}
	return w, nil
}

// rssSummary formats the smallest, median and largest RSS and RssAnon in MiB.
func rssSummary(rss map[string][2]int) string {
	var all, anon []int
	for _, v := range rss {
		all, anon = append(all, v[0]), append(anon, v[1])
	}
	if len(all) == 0 {
		return "no agent found"
	}
	slices.Sort(all)
	slices.Sort(anon)
	mib := func(kb int) float64 { return float64(kb) / 1024 }
	return fmt.Sprintf("%d agents, RSS min/median/max %.1f/%.1f/%.1f MiB, of it anonymous %.1f/%.1f/%.1f MiB",
		len(all), mib(all[0]), mib(all[len(all)/2]), mib(all[len(all)-1]), mib(anon[0]), mib(anon[len(anon)/2]), mib(anon[len(anon)-1]))
}

// ourAgent returns the node of args when they are those of a `slipway ops
// agent` started by this package's simulated cluster (its kubeconfig under
// the nodes' root), not of another test's agent on the same machine.
func ourAgent(args []string) (node string, ok bool) {
	if len(args) < 3 || filepath.Base(args[0]) != "slipway" || args[1] != "ops" || args[2] != "agent" {
		return "", false
	}
	node = protocol.ArgAfterFlag(args[1:], "--node-name") // the agent's flags read as its Jobs' are
	return node, node != "" && strings.HasPrefix(protocol.ArgAfterFlag(args[1:], "--kubeconfig"), env.NodesRoot+string(filepath.Separator))
}

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
	"k8s.io/client-go/kubernetes"
)

// agentRSS returns the resident memory (KiB) of every running agent
// process, by node, read from /proc.
func agentRSS() map[string]int {
	out := map[string]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		if len(args) < 5 || filepath.Base(args[0]) != "slipway" || args[1] != "ops" || args[2] != "agent" || args[3] != "--node-name" {
			continue
		}
		status, err := os.ReadFile(filepath.Join(d, "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				out[args[4]], _ = strconv.Atoi(f[1])
			}
		}
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
	var p expfmt.TextParser
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return writes{}, err
	}
	var w writes
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

// rssSummary formats the smallest, median and largest RSS in MiB.
func rssSummary(rss map[string]int) string {
	var v []int
	for _, kb := range rss {
		v = append(v, kb)
	}
	if len(v) == 0 {
		return "no agent found"
	}
	slices.Sort(v)
	mib := func(kb int) float64 { return float64(kb) / 1024 }
	return fmt.Sprintf("%d agents, min %.1f MiB, median %.1f MiB, max %.1f MiB", len(v), mib(v[0]), mib(v[len(v)/2]), mib(v[len(v)-1]))
}

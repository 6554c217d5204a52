package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// envProgress, set to 1, prints the rollout live (scripts/demo-rollout).
const envProgress = "SLIPWAY_E2E_PROGRESS"

// progress prints one line per change of the channel's status while ctx
// lasts: counts and who holds which slot at which phase. It records when
// each node took and freed its slot for the summary.
type progress struct {
	w              io.Writer
	start          time.Time
	took, finished map[string]time.Duration
}

func showProgress(ctx context.Context, c clients) *progress {
	if os.Getenv(envProgress) != "1" {
		return nil
	}
	p := &progress{w: os.Stdout, start: time.Now(), took: map[string]time.Duration{}, finished: map[string]time.Duration{}}
	w, err := c.ops.OpsV1().UpdateChannels(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=default"})
	if err != nil {
		return nil
	}
	go func() {
		last, held := "", map[string]bool{}
		for ev := range w.ResultChan() {
			ch, ok := ev.Object.(*v1.UpdateChannel)
			if !ok {
				continue
			}
			at := time.Since(p.start)
			now := map[string]bool{}
			var slots []string
			for _, s := range ch.Status.Updating {
				now[s.Node] = true
				if !held[s.Node] {
					p.took[s.Node] = at
				}
				slots = append(slots, fmt.Sprintf("%s->%s %s", s.Node, s.Version, s.Phase))
			}
			for n := range held {
				if !now[n] {
					p.finished[n] = at
				}
			}
			held = now
			c := ch.Status.Counts
			line := fmt.Sprintf("latest=%s up-to-date %d/%d  failed %d  slots [%s]", ch.Status.LatestVersion, c.UpToDate, c.Nodes, c.Failed,
				strings.Join(slots, ", "))
			if line != last {
				fmt.Fprintf(p.w, "%6.1fs  %s\n", at.Seconds(), line)
				last = line
			}
		}
	}()
	return p
}

// summary prints a table of every node: its version now and when it held its slot.
func (p *progress) summary(nodes []string, version func(string) string) {
	if p == nil {
		return
	}
	sort.Slice(nodes, func(i, j int) bool { return p.took[nodes[i]] < p.took[nodes[j]] })
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tVERSION\tSLOT TAKEN\tSLOT FREED\tHELD")
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%.1fs\t%.1fs\t%.1fs\n", n, version(n), p.took[n].Seconds(), p.finished[n].Seconds(), (p.finished[n] - p.took[n]).Seconds())
	}
	tw.Flush()
}

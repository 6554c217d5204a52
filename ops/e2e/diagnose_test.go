package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// dumpOnFailure logs, when t has failed, what a stuck rollout needs read
// after the fact: the channel's status, each node's slipway annotations,
// labels and cordon, and the last lines of the controller's and each
// agent's log (a CI run keeps nothing else).
func dumpOnFailure(t testing.TB, c clients) {
	t.Cleanup(func() {
		if !t.Failed() || env == nil {
			return
		}
		ctx := context.Background()
		if ch, err := c.ops.OpsV1().UpdateChannels(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			b, _ := json.MarshalIndent(ch.Status, "", "  ")
			t.Logf("channel default: spec.version %s, status:\n%s", ch.Spec.Version, b)
		}
		nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("list Nodes: %v", err)
		}
		for _, n := range nodes.Items {
			var keys []string
			for k, v := range n.Annotations {
				if strings.Contains(k, "slipway") {
					keys = append(keys, k+"="+v)
				}
			}
			sort.Strings(keys)
			t.Logf("node %s (unschedulable %v, labels %v):\n  %s", n.Name, n.Spec.Unschedulable, n.Labels, strings.Join(keys, "\n  "))
		}
		t.Logf("controller log (last 80 lines):\n%s", lastLines(filepath.Join(workDir, "controller.log"), 80))
		for _, node := range env.Nodes {
			t.Logf("agent log of %s (last 30 lines):\n%s", node, lastLines(filepath.Join(env.NodeDir(node), "agent.log"), 30))
		}
	})
}

// lastLines is the last n lines of the file at path (or why not).
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

package cli

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Diff prints the pod-template change between the active ERS and the
// spec (the canary's, while one runs) as a line diff of their YAML.
func (c *Client) Diff(ctx context.Context, name string) error {
	e, err := c.get(ctx, name)
	if err != nil {
		return err
	}
	if e.Status.ActiveReplicaSet == "" {
		return fmt.Errorf("ExtendedDaemonSet %s/%s has no active ERS yet (the controller has not seen it: is it running?)", c.Namespace, name)
	}
	active, err := c.EDS.ExtendedDaemonSetReplicaSets(c.Namespace).Get(ctx, e.Status.ActiveReplicaSet, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("the active ERS %s is gone; the controller recreates it", e.Status.ActiveReplicaSet)
	}
	if err != nil {
		return fmt.Errorf("read ERS %s: %w", e.Status.ActiveReplicaSet, err)
	}
	from, err := yaml.Marshal(active.Spec.Template)
	if err != nil {
		return err
	}
	to, err := yaml.Marshal(e.Spec.Template)
	if err != nil {
		return err
	}
	target := "spec"
	if e.Status.Canary != nil {
		target = e.Status.Canary.ReplicaSet + " (canary)"
	}
	fmt.Fprintf(c.Out, "--- %s (active)\n+++ %s\n", active.Name, target)
	lines := LineDiff(strings.Split(strings.TrimSuffix(string(from), "\n"), "\n"), strings.Split(strings.TrimSuffix(string(to), "\n"), "\n"))
	changed := false
	for _, l := range lines {
		if l[0] != ' ' {
			changed = true
		}
	}
	if !changed {
		fmt.Fprintln(c.Out, "(no difference: the spec runs the active template)")
		return nil
	}
	for _, l := range lines {
		fmt.Fprintln(c.Out, l)
	}
	return nil
}

// LineDiff is a longest-common-subsequence diff of two line lists: each
// output line starts with ' ' (both), '-' (only in a) or '+' (only in b).
func LineDiff(a, b []string) []string {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			out = append(out, "  "+a[i])
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, "- "+a[i])
			i++
		default:
			out = append(out, "+ "+b[j])
			j++
		}
	}
	for ; i < n; i++ {
		out = append(out, "- "+a[i])
	}
	for ; j < m; j++ {
		out = append(out, "+ "+b[j])
	}
	return out
}

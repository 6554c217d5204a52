package updateoperator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/kube"
)

// StatusRow is one node in `slipway update-operator status`.
type StatusRow struct {
	Node             string `json:"node"`
	State            string `json:"state"`
	Wanted           string `json:"wanted"`
	Active           string `json:"active"`
	CurrentVersion   string `json:"currentVersion,omitempty"`
	AvailableVersion string `json:"availableVersion,omitempty"`
	Cordoned         bool   `json:"cordoned"`
	CordonedByUs     bool   `json:"cordonedByOperator"`
	Excluded         bool   `json:"excluded,omitempty"`
	LastTransition   string `json:"lastTransition,omitempty"`
	Failures         int    `json:"failures"`
	Reason           string `json:"reason,omitempty"`
}

// StatusRows builds the rows of nodes, sorted by name.
func (k Keys) StatusRows(nodes []corev1.Node) []StatusRow {
	rows := make([]StatusRow, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		a := n.Annotations
		v := k.View(n, "")
		rows = append(rows, StatusRow{
			Node: n.Name, State: orDash(a[k.State()]), Wanted: orDash(a[k.Wanted()]), Active: orDash(a[k.Active()]),
			CurrentVersion: a[k.Key(KeyCurrentVersion)], AvailableVersion: a[k.Key(KeyAvailableVersion)],
			Cordoned: n.Spec.Unschedulable, CordonedByUs: v.CordonedByUs, Excluded: v.Excluded,
			LastTransition: a[k.Key(KeyTransition)], Failures: v.Failures, Reason: a[k.Key(KeyReason)],
		})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Node < rows[j].Node })
	return rows
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// StatusOptions configure `slipway update-operator status`.
type StatusOptions struct {
	Config    *rest.Config
	Prefix    string
	Namespace string // the controller's (its fleet state); default DefaultNamespace
	// HaltAfter is the controller's --halt-after, to tell halted releases
	// (default 2, the flag's).
	HaltAfter int
	JSON      bool
	Out       io.Writer
}

// Status prints one row per node: state, intents, versions, cordon,
// last transition, failures.
func Status(ctx context.Context, o StatusOptions) error {
	keys, err := NewKeys(o.Prefix)
	if err != nil {
		return err
	}
	c, err := kube.NewForConfig(o.Config)
	if err != nil {
		return err
	}
	list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	rows := keys.StatusRows(list.Items)
	halts, err := haltedReleases(ctx, c, o, keys)
	if err != nil {
		return err
	}
	if o.JSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"prefix": keys.Prefix, "nodes": rows, "halted": halts})
	}
	if err := writeTable(o.Out, rows); err != nil {
		return err
	}
	for _, h := range halts {
		fmt.Fprintln(o.Out, "HALTED:", h)
	}
	return nil
}

// haltedReleases are the reasons of the releases the controller's brake
// holds, read from its fleet state (none when it has none yet).
func haltedReleases(ctx context.Context, c *kube.Clientset, o StatusOptions, keys Keys) ([]string, error) {
	ns := o.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	if o.HaltAfter == 0 {
		o.HaltAfter = 2
	}
	cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, FleetStateName(keys.Prefix), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the fleet state: %w", err)
	}
	var f Fleet
	if err := json.Unmarshal([]byte(cm.Data[fleetDataKey]), &f); err != nil && cm.Data[fleetDataKey] != "" {
		return nil, fmt.Errorf("the fleet state (ConfigMap %s/%s) is not its JSON: %w", ns, cm.Name, err)
	}
	p := Policy{HaltAfter: o.HaltAfter}
	if f.HaltAfter > 0 {
		p.HaltAfter = f.HaltAfter // as the controller counts
	}
	var out []string
	for _, v := range f.Halted(p) {
		out = append(out, f.HaltReason(v, p))
	}
	if f.AnalysisFailed != nil {
		out = append(out, f.AnalysisFailed.Message())
	}
	return out, nil
}

func writeTable(out io.Writer, rows []StatusRow) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tSTATE\tWANTED\tACTIVE\tCURRENT\tAVAILABLE\tCORDONED\tLAST TRANSITION\tFAILURES\tREASON")
	for _, r := range rows {
		cordon := "no"
		switch {
		case r.CordonedByUs:
			cordon = "yes (operator)"
		case r.Cordoned:
			cordon = "yes"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Node, r.State, r.Wanted, r.Active, orDash(r.CurrentVersion),
			orDash(r.AvailableVersion), cordon, orDash(r.LastTransition), strconv.Itoa(r.Failures), r.Reason)
	}
	return w.Flush()
}

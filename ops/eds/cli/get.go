package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	kjson "sigs.k8s.io/json"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds/plan"
)

// Now is the clock of the AGE columns.
var Now = time.Now

func age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(Now().Sub(t.Time))
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// table writes rows under header, aligned like kubectl's, with a NAMESPACE
// column first for --all-namespaces.
func (c *Client) table(header []string, rows [][]string, namespaces []string) error {
	w := tabwriter.NewWriter(c.Out, 3, 0, 3, ' ', 0)
	if c.AllNamespaces {
		header = append([]string{"NAMESPACE"}, header...)
	}
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for i, r := range rows {
		if c.AllNamespaces {
			r = append([]string{namespaces[i]}, r...)
		}
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	return w.Flush()
}

// listed is one ExtendedDaemonSet as the API server holds it: decoded, or
// (problem set) only its metadata and why the rest cannot be read.
type listed struct {
	e       v1.ExtendedDaemonSet
	raw     json.RawMessage
	problem error
}

// listEDS reads one ExtendedDaemonSet (name) or those of the namespace,
// decoding each on its own: one that cannot be decoded (the API server
// accepted what this version cannot read) is returned with the reason
// instead of failing the whole list, as the controller copes with it.
func (c *Client) listEDS(ctx context.Context, name string) ([]listed, error) {
	var raws []json.RawMessage
	if name != "" {
		if c.Namespace == "" {
			return nil, errors.New("name the namespace of the ExtendedDaemonSet (-n)")
		}
		raw, err := c.EDS.RESTClient().Get().Resource("extendeddaemonsets").Namespace(c.Namespace).Name(name).Do(ctx).Raw()
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no ExtendedDaemonSet %q in namespace %q (list them with kubectl eds get; -n picks the namespace)", name, c.Namespace)
		}
		if err != nil {
			return nil, fmt.Errorf("read ExtendedDaemonSet %s/%s: %w", c.Namespace, name, err)
		}
		raws = []json.RawMessage{raw}
	} else {
		raw, err := c.EDS.RESTClient().Get().Resource("extendeddaemonsets").Namespace(c.ns()).Do(ctx).Raw()
		if err != nil {
			return nil, fmt.Errorf("list ExtendedDaemonSets: %w", err)
		}
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("list ExtendedDaemonSets: %w", err)
		}
		raws = list.Items
	}
	out := make([]listed, 0, len(raws))
	for _, raw := range raws {
		var l listed
		l.raw = raw
		if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &l.e); err != nil {
			var head struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			}
			_ = json.Unmarshal(raw, &head)
			l.e = v1.ExtendedDaemonSet{ObjectMeta: head.Metadata}
			l.problem = err
		}
		out = append(out, l)
	}
	return out, nil
}

// Get prints one ExtendedDaemonSet (name) or all of the namespace. One
// that cannot be decoded is printed as such (STATUS Invalid, REASON
// Undecodable, and why below the table; as the API server holds it with
// -o json|yaml), not an error for the whole namespace.
func (c *Client) Get(ctx context.Context, name string) error {
	items, err := c.listEDS(ctx, name)
	if err != nil {
		return err
	}
	if c.Output == "json" || c.Output == "yaml" {
		objs := make([]any, len(items))
		for i, l := range items {
			if l.problem != nil {
				objs[i] = l.raw // as stored: what cannot be decoded is shown, not dropped
				continue
			}
			l.e.TypeMeta = metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: "ExtendedDaemonSet"}
			objs[i] = l.e
		}
		return c.printObjects(objs, name != "")
	}
	header := []string{"NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "IGNORED UNRESPONSIVE NODES", "STATUS", "REASON", "ACTIVE RS", "CANARY RS", "AGE"}
	wide := c.Output == "wide"
	if wide {
		header = append(header, "CANARY NODES", "ANALYSIS", "NODE SELECTOR")
	}
	var rows [][]string
	var nss, why []string
	for _, l := range items {
		e := l.e
		if l.problem != nil {
			row := []string{e.Name, "-", "-", "-", "-", "-", "-", "Invalid", "Undecodable", "-", "-", age(e.CreationTimestamp)}
			if wide {
				row = append(row, "-", "-", "-")
			}
			rows = append(rows, row)
			nss = append(nss, e.Namespace)
			why = append(why, fmt.Sprintf("ExtendedDaemonSet %s/%s cannot be read: %v; fix its spec (kubectl edit eds %s -n %s)", e.Namespace, e.Name, l.problem, e.Name, e.Namespace))
			continue
		}
		s := e.Status
		canary, nodes := "", ""
		if s.Canary != nil {
			canary, nodes = s.Canary.ReplicaSet, strings.Join(s.Canary.Nodes, ",")
		}
		row := []string{e.Name, fmt.Sprint(s.Desired), fmt.Sprint(s.Current), fmt.Sprint(s.Ready), fmt.Sprint(s.UpToDate),
			fmt.Sprint(s.Available), fmt.Sprint(s.IgnoredUnresponsiveNodes), orNone(string(s.State)), orNone(s.Reason),
			orNone(s.ActiveReplicaSet), orNone(canary), age(e.CreationTimestamp)}
		if wide {
			row = append(row, orNone(nodes), analysisColumn(&e), selectorString(e.Spec.Selector))
		}
		rows = append(rows, row)
		nss = append(nss, e.Namespace)
	}
	if err := c.table(header, rows, nss); err != nil {
		return err
	}
	for _, w := range why {
		if _, err := fmt.Fprintln(c.Out, w); err != nil {
			return err
		}
	}
	return nil
}

// GetERS prints the ERSs of one ExtendedDaemonSet (name) or of the namespace.
func (c *Client) GetERS(ctx context.Context, name string) error {
	opts := metav1.ListOptions{}
	if name != "" {
		if _, err := c.get(ctx, name); err != nil {
			return err
		}
		opts.LabelSelector = labels.SelectorFromSet(labels.Set{v1.LabelEDSOwner: name}).String()
	}
	list, err := c.EDS.ExtendedDaemonSetReplicaSets(c.ns()).List(ctx, opts)
	if err != nil {
		return fmt.Errorf("list ExtendedDaemonSetReplicaSets: %w", err)
	}
	if c.Output == "json" || c.Output == "yaml" {
		objs := make([]any, len(list.Items))
		for i := range list.Items {
			list.Items[i].TypeMeta = metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: "ExtendedDaemonSetReplicaSet"}
			objs[i] = list.Items[i]
		}
		return c.printObjects(objs, false)
	}
	header := []string{"NAME", "STATUS", "DESIRED", "CURRENT", "READY", "AVAILABLE", "NODE SELECTOR", "AGE"}
	var rows [][]string
	var nss []string
	for _, s := range list.Items {
		st := s.Status
		rows = append(rows, []string{s.Name, orNone(st.Status), fmt.Sprint(st.Desired), fmt.Sprint(st.Current), fmt.Sprint(st.Ready),
			fmt.Sprint(st.Available), selectorString(s.Spec.Selector), age(s.CreationTimestamp)})
		nss = append(nss, s.Namespace)
	}
	return c.table(header, rows, nss)
}

// Selections of Pods.
const (
	SelectAll      = "all"
	SelectCanary   = "canary"
	SelectNotReady = "not-ready"
)

// Pods prints the pods of an ExtendedDaemonSet: all, the canary's, or those not ready.
func (c *Client) Pods(ctx context.Context, name, selection string) error {
	e, err := c.get(ctx, name)
	if err != nil {
		return err
	}
	set := labels.Set{v1.LabelName: name}
	switch selection {
	case SelectAll, "":
	case SelectCanary:
		ers, err := canaryOf(e)
		if err != nil {
			return err
		}
		set[v1.LabelReplicaSet] = ers
	case SelectNotReady:
	default:
		return fmt.Errorf("unknown selection %q: use --select canary, not-ready or all", selection)
	}
	list, err := c.Kube.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(set).String()})
	if err != nil {
		return fmt.Errorf("list the pods of %s/%s: %w", c.Namespace, name, err)
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if selection != SelectNotReady || !plan.PodHealth(&p).Ready {
			pods = append(pods, p)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Spec.NodeName < pods[j].Spec.NodeName })
	if c.Output == "json" || c.Output == "yaml" {
		objs := make([]any, len(pods))
		for i := range pods {
			pods[i].TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
			objs[i] = pods[i]
		}
		return c.printObjects(objs, false)
	}
	return c.podTable(pods)
}

func (c *Client) podTable(pods []corev1.Pod) error {
	header := []string{"NAME", "READY", "STATUS", "RESTARTS", "NODE", "ERS", "CANARY", "AGE"}
	if c.Output == "wide" {
		header = append(header, "IP", "IMAGE")
	}
	var rows [][]string
	var nss []string
	for _, p := range pods {
		h := plan.PodHealth(&p)
		ready := 0
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Ready {
				ready++
			}
		}
		status := string(p.Status.Phase)
		switch {
		case p.DeletionTimestamp != nil:
			status = "Terminating"
		case h.CannotStart != "":
			status = h.CannotStart
		case h.RestartReason == "CrashLoopBackOff":
			status = "CrashLoopBackOff"
		}
		canary := "false"
		if p.Labels[v1.LabelCanary] == "true" {
			canary = "true"
		}
		row := []string{p.Name, fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers)), orNone(status), fmt.Sprint(h.Restarts),
			orNone(p.Spec.NodeName), p.Labels[v1.LabelReplicaSet], canary, age(p.CreationTimestamp)}
		if c.Output == "wide" {
			row = append(row, orNone(p.Status.PodIP), p.Spec.Containers[0].Image)
		}
		rows = append(rows, row)
		nss = append(nss, p.Namespace)
	}
	return c.table(header, rows, nss)
}

// selectorString prints a label selector as kubectl does ("<none>" when empty).
func selectorString(sel *metav1.LabelSelector) string {
	if sel != nil {
		if ls, err := metav1.LabelSelectorAsSelector(sel); err == nil && !ls.Empty() {
			return ls.String()
		}
	}
	return "<none>"
}

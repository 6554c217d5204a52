package scale

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"slipway.dev/slipway/ops/agentmem"
	"slipway.dev/slipway/ops/e2e/benchside"
	"slipway.dev/slipway/ops/testenv"
)

// nodeWatcher is one more watcher of every Node, as a CNI, monitoring or
// autoscaling agent runs on a real cluster: an informer (client-go's
// defaults: JSON) whose connection counts the bytes it receives.
type nodeWatcher struct {
	store  cache.Store
	stop   chan struct{}
	bytes  atomic.Int64
	events atomic.Int64

	// rolledEvents and rolledBytes count the updates of the nodes the
	// rollout moves (rolledNode): what the rollout itself caused. The rest
	// are the fleet's own (the simulated kubelets' status heartbeats), in whatever number the
	// window happened to hold. rolledBytes are the objects' JSON sizes, not
	// the wire's (the informer receives protobuf, smaller).
	rolledEvents, rolledBytes atomic.Int64

	mu       sync.Mutex
	byWriter map[string]writerCount // the updates received, by the writer that caused them (writerOf)
}

// rolledNode tells a node the rollout moves: every worker when all are
// rolled, else the workers labelled rollLabel.
func rolledNode(n *corev1.Node) bool {
	if _, worker := n.Labels[testenv.NodeRoleLabel]; !worker {
		return false
	}
	_, labelled := n.Labels[rollLabel]
	return rolled >= nodes || labelled
}

// writerCount is the Node updates one writer caused at the watcher: how
// many, and their JSON bytes (the object each carries, as it arrives).
type writerCount struct {
	events, bytes int64
}

// writerOf names who wrote the change from old to cur: the managers whose
// managedFields entries the write changed (their time or their fields),
// joined by "+"; "same second: <the parts changed>" when no entry changed (a
// writer writing the same fields within the second its entry already shows).
func writerOf(old, cur *corev1.Node) string {
	before := map[string]metav1.ManagedFieldsEntry{}
	key := func(m metav1.ManagedFieldsEntry) string {
		return m.Manager + "/" + string(m.Operation) + "/" + m.Subresource
	}
	for _, m := range old.ManagedFields {
		before[key(m)] = m
	}
	var who []string
	for _, m := range cur.ManagedFields {
		b, ok := before[key(m)]
		changed := !ok || !b.Time.Equal(m.Time) || (b.FieldsV1 == nil) != (m.FieldsV1 == nil) ||
			b.FieldsV1 != nil && !bytes.Equal(b.FieldsV1.GetRawBytes(), m.FieldsV1.GetRawBytes())
		if changed {
			name := m.Manager
			if m.Subresource != "" {
				name += "(" + m.Subresource + ")"
			}
			who = append(who, name)
		}
	}
	if len(who) == 0 {
		return "same second: " + partsChanged(old, cur)
	}
	slices.Sort(who)
	name := strings.Join(slices.Compact(who), "+")
	if name == "kwok(status)" && heartbeatOnly(old, cur) {
		// The simulated kubelet's periodic status report (the testenv
		// heartbeat package, at a fixed point of each node's 5 minutes),
		// apart from its reports of a change (NotReady, Ready again).
		return "heartbeat"
	}
	return name
}

// heartbeatOnly reports whether the change from old to cur is a status
// heartbeat alone: the conditions' lastHeartbeatTime moved, nothing else.
func heartbeatOnly(old, cur *corev1.Node) bool {
	if !maps.Equal(old.Labels, cur.Labels) || !maps.Equal(old.Annotations, cur.Annotations) || !equality.Semantic.DeepEqual(old.Spec, cur.Spec) {
		return false
	}
	o, c := old.Status.DeepCopy(), cur.Status.DeepCopy()
	for _, st := range []*corev1.NodeStatus{o, c} {
		for i := range st.Conditions {
			st.Conditions[i].LastHeartbeatTime = metav1.Time{}
		}
	}
	return equality.Semantic.DeepEqual(o, c)
}

// partsChanged names the parts of a Node a write changed (status, spec,
// labels, annotations), for a write writerOf cannot tell by its manager.
func partsChanged(old, cur *corev1.Node) string {
	var parts []string
	for _, p := range []struct {
		name string
		same bool
	}{
		{"status", equality.Semantic.DeepEqual(old.Status, cur.Status)},
		{"spec", equality.Semantic.DeepEqual(old.Spec, cur.Spec)},
		{"labels", maps.Equal(old.Labels, cur.Labels)},
		{"annotations", maps.Equal(old.Annotations, cur.Annotations)},
	} {
		if !p.same {
			parts = append(parts, p.name)
		}
	}
	if len(parts) == 0 {
		return "nothing seen"
	}
	return strings.Join(parts, "+")
}

// noteUpdate counts an update at the watcher by its writer.
func (w *nodeWatcher) noteUpdate(old, cur any) {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	b, _ := json.Marshal(n)
	if rolledNode(n) {
		w.rolledEvents.Add(1)
		w.rolledBytes.Add(int64(len(b)))
	}
	who := writerOf(o, n)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byWriter == nil {
		w.byWriter = map[string]writerCount{}
	}
	c := w.byWriter[who]
	c.events++
	c.bytes += int64(len(b))
	w.byWriter[who] = c
}

// writers is a copy of the counts by writer so far.
func (w *nodeWatcher) writers() map[string]writerCount {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.byWriter)
}

// writersSince is the counts by writer from before to after, as the result
// line's value: writer:events:bytes, comma-separated, most bytes first
// (spaces in a writer's name as underscores, colons left out).
func writersSince(before, after map[string]writerCount) string {
	type row struct {
		who string
		c   writerCount
	}
	var rows []row
	for who, c := range after {
		b := before[who]
		if d := (writerCount{c.events - b.events, c.bytes - b.bytes}); d.events > 0 {
			rows = append(rows, row{strings.NewReplacer(" ", "_", ":", "").Replace(who), d})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return int(b.c.bytes - a.c.bytes) })
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s:%d:%d", r.who, r.c.events, r.c.bytes))
	}
	return strings.Join(out, ",")
}

// countingBody counts what is read from a response body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

type countingTransport struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if resp != nil && resp.Body != nil {
		resp.Body = countingBody{resp.Body, t.n}
	}
	return resp, err
}

// watchNodes starts the extra watcher and waits for its first list.
func watchNodes(cfg *rest.Config) (*nodeWatcher, error) {
	w := &nodeWatcher{stop: make(chan struct{})}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "node-watcher (a CNI agent's stand-in)"
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, &w.bytes} })
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	f := informers.NewSharedInformerFactory(c, 0)
	inf := f.Core().V1().Nodes().Informer()
	count := func(any) { w.events.Add(1) }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: count, UpdateFunc: func(old, cur any) { count(cur); w.noteUpdate(old, cur) }, DeleteFunc: count}); err != nil {
		return nil, err
	}
	w.store = inf.GetStore()
	f.Start(w.stop)
	if !cache.WaitForCacheSync(w.stop, inf.HasSynced) {
		return nil, fmt.Errorf("the node watcher's cache never synced")
	}
	return w, nil
}

// received is what the watcher has received so far: bytes and events.
func (w *nodeWatcher) received() (int64, int64) { return w.bytes.Load(), w.events.Load() }

// receivedOnRolled is what it has received so far in updates of the
// rolled nodes: their objects' bytes and the events.
func (w *nodeWatcher) receivedOnRolled() (int64, int64) {
	return w.rolledBytes.Load(), w.rolledEvents.Load()
}

// nodes are the Nodes in the watcher's cache.
func (w *nodeWatcher) nodes() []*corev1.Node {
	var out []*corev1.Node
	for _, o := range w.store.List() {
		if n, ok := o.(*corev1.Node); ok {
			out = append(out, n)
		}
	}
	return out
}

// notReadyTainted counts the Nodes in the watcher's cache that are not
// Ready or carry the node lifecycle controller's not-ready taint.
func (w *nodeWatcher) notReadyTainted() int {
	n := 0
	for _, node := range w.nodes() {
		if !testenv.NodeReady(node) || slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady }) {
			n++
		}
	}
	return n
}

// nodeBytes is the mean size of a Node in the watcher's cache, JSON-encoded
// as it arrives.
func (w *nodeWatcher) nodeBytes() float64 {
	ns := w.nodes()
	if len(ns) == 0 {
		return 0
	}
	var sum int
	for _, n := range ns {
		b, _ := json.Marshal(n)
		sum += len(b)
	}
	return float64(sum) / float64(len(ns))
}

// contenderBytes is the mean of what the contenders add to a Node at rest
// (JSON bytes): their labels and annotations and their managers' entries
// in managedFields, measured as the Node's size less the same Node
// without them. The simulator's entries (its reboot's annotations and boot
// ID, manager slipway-testenv) are the node's, whichever contender asked
// for the reboot.
func (w *nodeWatcher) contenderBytes() float64 {
	ns := w.nodes()
	if len(ns) == 0 {
		return 0
	}
	ours := func(k string) bool {
		return strings.Contains(k, "ops.slipway.dev/") || strings.Contains(k, "drain.slipway.dev/") || strings.HasPrefix(k, "plan.upgrade.cattle.io/")
	}
	var sum int
	for _, n := range ns {
		full, _ := json.Marshal(n)
		bare := n.DeepCopy()
		maps.DeleteFunc(bare.Annotations, func(k, _ string) bool { return ours(k) })
		maps.DeleteFunc(bare.Labels, func(k, _ string) bool { return ours(k) })
		bare.ManagedFields = slices.DeleteFunc(bare.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
			if strings.HasPrefix(m.Manager, "slipway-testenv") {
				return false // the simulator's
			}
			for _, who := range []string{"slipway", "system-upgrade", "kubectl"} {
				if strings.Contains(m.Manager, who) {
					return true
				}
			}
			return false
		})
		less, _ := json.Marshal(bare)
		sum += len(full) - len(less)
	}
	return float64(sum) / float64(len(ns))
}

// requests counts the apiserver's requests by verb (apiserver_request_total).
type requests map[string]float64

// parseRequests reads apiserver_request_total from a /metrics body.
func parseRequests(body []byte) (requests, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse the apiserver's /metrics: %w", err)
	}
	out := requests{}
	if fam := fams["apiserver_request_total"]; fam != nil {
		for _, m := range fam.GetMetric() {
			var verb, resource string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "verb":
					verb = l.GetValue()
				case "resource":
					resource = l.GetValue()
				}
			}
			out[verb] += m.GetCounter().GetValue()
			if resource == "leases" {
				out["LEASE "+verb] += m.GetCounter().GetValue()
			}
		}
	}
	return out, nil
}

// scrapeWatches reads how many watches the API server holds open now, by
// resource ("*": all).
func scrapeWatches(ctx context.Context, c kubernetes.Interface) (map[string]float64, error) {
	body, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the apiserver's /metrics: %w", err)
	}
	return parseWatches(body)
}

// parseWatches reads apiserver_longrunning_requests{verb="WATCH"} from a
// /metrics body, by resource ("*": all).
func parseWatches(body []byte) (map[string]float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse the apiserver's /metrics: %w", err)
	}
	out := map[string]float64{}
	for _, m := range fams["apiserver_longrunning_requests"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["verb"] == "WATCH" {
			out[labels["resource"]] += m.GetGauge().GetValue()
			out["*"] += m.GetGauge().GetValue()
		}
	}
	return out, nil
}

// watchChurn is what the API server counted of a resource's watches opened
// and closed: the initial events it sent on watches as they opened (a relist
// after a termination, a new watch's first list: apiserver_init_events_total)
// and the watchers it ended as too slow (apiserver_terminated_watchers_total).
type watchChurn struct {
	InitEvents, Terminated float64
}

// since is the churn between before and c.
func (c watchChurn) since(before watchChurn) watchChurn {
	return watchChurn{InitEvents: c.InitEvents - before.InitEvents, Terminated: c.Terminated - before.Terminated}
}

// parseWatchChurn reads resource's watch churn counters from a /metrics body.
func parseWatchChurn(body []byte, resource string) (watchChurn, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return watchChurn{}, fmt.Errorf("parse the apiserver's /metrics: %w", err)
	}
	sum := func(name string) float64 {
		var v float64
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "resource" && l.GetValue() == resource {
					v += m.GetCounter().GetValue()
				}
			}
		}
		return v
	}
	return watchChurn{InitEvents: sum("apiserver_init_events_total"), Terminated: sum("apiserver_terminated_watchers_total")}, nil
}

var writeVerbs = []string{"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY", "CREATE", "UPDATE"}
var readVerbs = []string{"GET", "LIST", "WATCH", "WATCHLIST"}

// since is the writes and reads between before and r, all and without Leases.
func (r requests) since(before requests) (writes, reads, writesNoLease, readsNoLease float64) {
	for _, v := range writeVerbs {
		writes += r[v] - before[v]
		writesNoLease += r[v] - before[v] - (r["LEASE "+v] - before["LEASE "+v])
	}
	for _, v := range readVerbs {
		reads += r[v] - before[v]
		readsNoLease += r[v] - before[v] - (r["LEASE "+v] - before["LEASE "+v])
	}
	return
}

// procUsage samples processes' CPU and peak memory (RSS, anonymous, PSS)
// from /proc; a process seen late counts from its first sample.
type procUsage struct {
	find func() []int
	// memEvery: memory is read at every memEvery-th sample only (CPU at
	// each): reading a large process's memory (smaps_rollup walks its
	// every page) costs more than its CPU time.
	memEvery, taken int
	mu              sync.Mutex
	first, last     map[int]time.Duration
	rss, anon, pss  map[int]int // KiB, peaks
	stop, done      chan struct{}
}

func sample(find func() []int, every time.Duration) *procUsage { return sampleMem(find, every, 1) }

// sampleMem is sample reading memory at every memEvery-th sample only.
func sampleMem(find func() []int, every time.Duration, memEvery int) *procUsage {
	u := &procUsage{find: find, memEvery: max(memEvery, 1), first: map[int]time.Duration{}, last: map[int]time.Duration{},
		rss: map[int]int{}, anon: map[int]int{}, pss: map[int]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	u.take()
	go func() {
		defer close(u.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-u.stop:
				u.take()
				return
			case <-t.C:
				u.take()
			}
		}
	}()
	return u
}

func (u *procUsage) take() {
	withMem := u.taken%u.memEvery == 0
	u.taken++
	for _, pid := range u.find() {
		cpu, err := benchside.ProcCPU(pid)
		if err != nil {
			continue
		}
		var m agentmem.Split
		if withMem {
			m, _ = agentmem.ReadSplit(strconv.Itoa(pid))
		}
		u.mu.Lock()
		if _, ok := u.first[pid]; !ok {
			u.first[pid] = cpu
		}
		u.last[pid] = cpu
		u.rss[pid], u.anon[pid], u.pss[pid] = max(u.rss[pid], m.RSS), max(u.anon[pid], m.Anon), max(u.pss[pid], m.PSS)
		u.mu.Unlock()
	}
}

// end stops the sampling and returns the CPU used in all, and the peaks
// (MiB) summed over the processes.
func (u *procUsage) end() (cpu time.Duration, rss, anon, pss float64, procs int) {
	close(u.stop)
	<-u.done
	u.mu.Lock()
	defer u.mu.Unlock()
	for pid, c := range u.last {
		cpu += c - u.first[pid]
		rss += float64(u.rss[pid]) / 1024
		anon += float64(u.anon[pid]) / 1024
		pss += float64(u.pss[pid]) / 1024
	}
	return cpu, rss, anon, pss, len(u.last)
}

package updateoperator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/testenv"
)

// loseRecordAnswer is a transport that sends a write of the controller's
// record the API server applies, then loses its answer: the first one
// that match says is the one, from the node's record before (prev, nil:
// none) and after. With cancel, it ends the controller as it loses it
// (as a leader whose Lease ended, or whose process stopped, while the
// request was on its way); else the connection is reset, and then is
// called first.
type loseRecordAnswer struct {
	next   http.RoundTripper
	path   string // the fleet state ConfigMap's
	keys   Keys
	match  func(k Keys, prev, next map[string]string) bool
	cancel context.CancelFunc
	then   func(node string)
	mu     sync.Mutex
	prev   map[string]map[string]string // each node's record as last written
	lost   []string
}

func (l *loseRecordAnswer) wrap(rt http.RoundTripper) http.RoundTripper { l.next = rt; return l }

func (l *loseRecordAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPatch || !strings.HasSuffix(req.URL.Path, l.path) || req.Body == nil {
		return l.next.RoundTrip(req)
	}
	body, err := peekBody(req)
	if err != nil {
		return nil, err
	}
	var p struct {
		Data map[string]*string `json:"data"`
	}
	_ = json.Unmarshal(body, &p)
	l.mu.Lock()
	defer l.mu.Unlock()
	hit := ""
	for k, v := range p.Data {
		node, ok := strings.CutPrefix(k, nodeRecordPrefix)
		if !ok {
			continue
		}
		var r map[string]string
		if v != nil {
			_ = json.Unmarshal([]byte(*v), &r)
		}
		if len(l.lost) == 0 && hit == "" && l.match(l.keys, l.prev[node], r) {
			hit = node
		}
		l.prev[node] = r
	}
	resp, err := l.next.RoundTrip(req)
	if err != nil || hit == "" || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	l.lost = append(l.lost, hit)
	if l.cancel == nil {
		if l.then != nil {
			l.then(hit)
		}
		return nil, errors.New("read: connection reset by peer (the test lost the answer after the API server applied the write)")
	}
	l.cancel()
	return nil, fmt.Errorf("%w (the test lost the answer after the API server applied the write)", context.Canceled)
}

func (l *loseRecordAnswer) lostOn() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lost...)
}

// The API server applies a write of the controller's record, but its
// answer is lost as the controller's context ends (its leadership lost
// while the request was on its way); a new leader loads the record
// next. The write that drops the first node's cordon from the record:
// when it went before the Node's uncordon, the controller skipped the
// uncordon, so the new leader found a record without the cordon the Node
// still carried, took the cordon for someone else's, never lifted it and
// started the second node beside it (two in flight at max-concurrent 1
// by the Nodes, the first cordoned for good); read back, the record
// write was known and the Node write went on. It now follows the Node's
// uncordon (uncordon.go, TestUncordonCutThenNewLeader): the record the
// new leader loads agrees with the Node. With the controller
// ended at once, the write that adds the cordon with perform-update was
// only conservative, and still is: the new leader carries out the intent
// the record holds (the slot was the node's already) and cordons it anew;
// so was the one that starts the first node (prepare-update).
//
// The start's answer lost to a reset connection, the leader going on,
// its first node excluded at that moment (an admin's label): before, the
// leader took the start for unwritten and started the second node in its
// place, while the ConfigMap held the first one's intent, which the next
// leader wrote on its Node (two in flight at max-concurrent 1). Read
// back, the start is known: the first node's update goes on, alone.
func TestLostRecordAnswerThenNewLeader(t *testing.T) {
	starts := func(k Keys, prev, next map[string]string) bool {
		return prev[k.Wanted()] != string(IntentPrepare) && next[k.Wanted()] == string(IntentPrepare)
	}
	for i, c := range []struct {
		name  string
		match func(k Keys, prev, next map[string]string) bool
		// goOn: the leader goes on after the lost answer (the connection
		// reset, then is called), until some node wants prepare-update.
		goOn bool
		then func(f *fleet, node string)
	}{
		{name: "uncordon", match: func(_ Keys, prev, next map[string]string) bool {
			return prev[drain.AnnotationCordonedBy] != "" && next != nil && next[drain.AnnotationCordonedBy] == ""
		}},
		{name: "cordon", match: func(_ Keys, prev, next map[string]string) bool {
			return prev[drain.AnnotationCordonedBy] == "" && next[drain.AnnotationCordonedBy] != ""
		}},
		{name: "start", match: starts},
		{name: "start then excluded", match: starts, goOn: true, then: func(f *fleet, node string) {
			f.patch(node, map[string]any{"metadata": map[string]any{"labels": map[string]any{f.keys.Exclude(): "true"}}})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFleet(t, fmt.Sprintf("lostrec%d", i), 2)
			stopWatch, most := watchInFlight(t, f)
			defer stopWatch()
			ctx, cancel := context.WithCancel(context.Background())
			lose := &loseRecordAnswer{path: "/configmaps/" + FleetStateName(f.prefix), keys: f.keys, match: c.match, prev: map[string]map[string]string{}}
			if c.goOn {
				lose.then = func(node string) { c.then(f, node) }
			} else {
				lose.cancel = cancel
			}
			done := f.run(ctx, lose.wrap, nil)
			t.Cleanup(func() { cancel(); <-done })
			if c.goOn { // the first leader goes on until a node is started, then ends
				eventually(t, 3*time.Minute, "a node started after the lost answer", func() (bool, string) {
					if len(lose.lostOn()) == 0 {
						return false, "no answer lost yet"
					}
					for _, name := range f.nodes {
						if f.keys.View(f.node(name), "").Wanted == IntentPrepare {
							return true, ""
						}
					}
					return false, "no node wants prepare-update"
				})
				cancel()
			}
			select { // the first leader ends
			case <-done:
			case <-time.After(3 * time.Minute):
				t.Fatalf("the record write was not reached (lost: %v)", lose.lostOn())
			}
			lost := lose.lostOn()
			if len(lost) != 1 {
				t.Fatalf("answers lost: %v; want one (the case was not exercised)", lost)
			}
			stop := f.controller(nil) // the new leader
			defer stop()
			eventually(t, 3*time.Minute, "both nodes at v2, at rest, uncordoned", func() (bool, string) {
				if seen := most(); seen > 1 { // fails at once: the first node would stay cordoned for good
					t.Fatalf("%d nodes in flight at once at max-concurrent 1 (record answer lost on %s); %s", seen, lost[0], describe(f))
				}
				return f.done()
			})
			if seen := most(); seen > 1 {
				t.Errorf("%d nodes in flight at once at max-concurrent 1", seen)
			}
		})
	}
}

// describe says where each node of f is.
func describe(f *fleet) string {
	var out []string
	for _, name := range f.nodes {
		n := f.node(name)
		v := f.keys.View(n, "")
		out = append(out, fmt.Sprintf("%s: %s wanted %s unschedulable %t cordoned-by %q", name, f.version(name), v.Wanted, n.Spec.Unschedulable, drain.CordonedBy(n.Annotations)))
	}
	return strings.Join(out, "; ")
}

// A record write that returned an error: what the controller keeps.
func TestRecordAfterWrite(t *testing.T) {
	for _, c := range []struct {
		name           string
		fate           WriteFate
		letsGo         bool
		keepNext, made bool
	}{
		{"landed: taken, the Node write goes on", WriteLanded, false, true, true},
		{"landed, an uncordon", WriteLanded, true, true, true},
		{"refused: as it was", WriteRefused, false, false, false},
		{"refused, an uncordon", WriteRefused, true, false, false},
		{"not seen, a start: the slot kept", WriteNotLanded, false, true, false},
		{"not seen, an uncordon: the cordon kept", WriteNotLanded, true, false, false},
		{"unknown, a cordon on an intent in flight", WriteUnknown, false, true, false},
		{"unknown, a finish: the slot kept", WriteUnknown, true, false, false},
		{"unknown, a target or a reason", WriteUnknown, false, true, false},
	} {
		keepNext, made := RecordAfterWrite(c.fate, c.letsGo)
		if keepNext != c.keepNext || made != c.made {
			t.Errorf("%s: RecordAfterWrite(%s, %v) = %v, %v; want %v, %v", c.name, c.fate, c.letsGo, keepNext, made, c.keepNext, c.made)
		}
	}
}

// Whether a fleet state ConfigMap carries a node's record.
func TestRecordCarries(t *testing.T) {
	r := map[string]string{"a": "1", "b": "2"}
	for _, c := range []struct {
		name string
		data map[string]string
		r    map[string]string
		want bool
	}{
		{"as written, keys in another order", map[string]string{"node.n": `{"b":"2","a":"1"}`}, r, true},
		{"a value differs", map[string]string{"node.n": `{"a":"1","b":"3"}`}, r, false},
		{"a key more", map[string]string{"node.n": `{"a":"1","b":"2","c":"3"}`}, r, false},
		{"absent", map[string]string{"node.m": `{"a":"1","b":"2"}`}, r, false},
		{"not JSON", map[string]string{"node.n": `{`}, r, false},
		{"a removal, done", map[string]string{"node.m": `{}`}, nil, true},
		{"a removal, not done", map[string]string{"node.n": `{"a":"1"}`}, nil, false},
	} {
		if got := RecordCarries(c.data, "n", c.r); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// Whether a node's record holds a slot or the operator's cordon, and
// whether a write lets go of one.
func TestRecordHolds(t *testing.T) {
	k := Keys{Prefix: DefaultPrefix}
	rest := map[string]string{k.Wanted(): string(IntentStabilize)}
	reboot := map[string]string{k.Wanted(): string(IntentReboot)}
	cordoned := func(r map[string]string) map[string]string {
		r = maps.Clone(r)
		r[drain.AnnotationCordonedBy] = k.CordonOwner()
		return r
	}
	for _, c := range []struct {
		name         string
		r            map[string]string
		slot, cordon bool
	}{
		{"none", nil, false, false},
		{"at rest", rest, false, false},
		{"prepare-update", map[string]string{k.Wanted(): string(IntentPrepare)}, true, false},
		{"prepare-update ahead", map[string]string{k.Wanted(): string(IntentPrepare), k.Key(KeyAhead): "true"}, false, false},
		{"perform-update, cordoned", cordoned(map[string]string{k.Wanted(): string(IntentPerform)}), true, true},
		{"reboot-update", reboot, true, false},
		{"reset-state", map[string]string{k.Wanted(): string(IntentReset)}, false, false},
		{"at rest, the cordon still held", cordoned(rest), true, true},
		{"another owner's cordon", map[string]string{k.Wanted(): string(IntentStabilize), drain.AnnotationCordonedBy: "someone"}, false, false},
		{"an unreadable intent", map[string]string{k.Wanted(): "x"}, false, false},
	} {
		if slot, cordon := k.RecordHolds(c.r); slot != c.slot || cordon != c.cordon {
			t.Errorf("%s: slot %v cordon %v, want %v %v", c.name, slot, cordon, c.slot, c.cordon)
		}
	}
	for _, c := range []struct {
		name      string
		old, next map[string]string
		want      bool
	}{
		{"a start", rest, map[string]string{k.Wanted(): string(IntentPrepare)}, false},
		{"a cordon", reboot, cordoned(reboot), false},
		{"the uncordon of a node back from its reboot (the slot stays)", cordoned(reboot), reboot, true},
		{"an uncordon that finishes", cordoned(reboot), rest, true},
		{"a finish", reboot, rest, true},
		{"a target, a reason", reboot, reboot, false},
		{"an uncordon's first write, with its finish (the cordon kept)", cordoned(reboot), cordoned(rest), true},
		{"an uncordon's first write, with its failure (the cordon kept)", cordoned(map[string]string{k.Wanted(): string(IntentPerform)}), cordoned(map[string]string{k.Wanted(): string(IntentReset)}), true},
		{"the undo of that first write", cordoned(rest), cordoned(reboot), false},
		{"an uncordon's first write, of a node back (the slot stays)", cordoned(reboot), cordoned(reboot), false},
	} {
		if got := k.RecordLetsGo(c.old, c.next); got != c.want {
			t.Errorf("%s: lets go %v, want %v", c.name, got, c.want)
		}
	}
}

// recordFault is a transport that, armed, loses the answer of the next
// PATCH of a ConfigMap (the API server applied it) or drops it unsent,
// and fails the read that follows when readFails.
type recordFault struct {
	next      http.RoundTripper
	mu        sync.Mutex
	patch     string // "lose", "drop" or "" (answered)
	readFails bool
}

func (r *recordFault) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.Contains(req.URL.Path, "/configmaps/") {
		return r.next.RoundTrip(req)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case req.Method == http.MethodPatch && r.patch == "drop":
		r.patch = ""
		return nil, errors.New("write: broken pipe (the test dropped the request unsent)")
	case req.Method == http.MethodPatch && r.patch == "lose":
		r.patch = ""
		resp, err := r.next.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("read: connection reset by peer (the test lost the answer)")
	case req.Method == http.MethodGet && r.readFails:
		r.readFails = false
		return nil, errors.New("dial: connection refused (the test failed the read)")
	}
	return r.next.RoundTrip(req)
}

func (r *recordFault) arm(patch string, readFails bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.patch, r.readFails = patch, readFails
}

// Each fate of a record write whose answer is lost, against the real API
// server: what the controller's copy, the ConfigMap and the next write
// hold.
func TestRecordWriteFates(t *testing.T) {
	e := testenv.Need(t, env)
	fault := &recordFault{}
	cfg := rest.CopyConfig(e.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { fault.next = rt; return fault })
	c, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k := Keys{Prefix: "recfate.update.slipway.dev"}
	s := &fleetState{kube: c, namespace: "default", name: FleetStateName(k.Prefix), nodes: map[string]map[string]string{},
		logf: func(what, node string, err error) { t.Logf("%s: %s: %v", node, what, err) }}
	_ = c.CoreV1().ConfigMaps("default").Delete(t.Context(), s.name, metav1.DeleteOptions{})
	if err := s.load(t.Context()); err != nil {
		t.Fatal(err)
	}
	keys := k.recordKeys()
	owner := k.CordonOwner()
	held := map[string]any{k.Wanted(): string(IntentReboot), drain.AnnotationCordonedBy: owner, drain.AnnotationSchedulableBefore: "true"}
	lifted := map[string]any{k.Wanted(): string(IntentStabilize), drain.AnnotationCordonedBy: nil, drain.AnnotationSchedulableBefore: nil}
	stored := func(node string) map[string]string {
		cm, err := c.CoreV1().ConfigMaps("default").Get(t.Context(), s.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, _, err := parseRecords(cm.Data)
		if err != nil {
			t.Fatal(err)
		}
		return r[node]
	}
	uncordoned := map[string]any{drain.AnnotationCordonedBy: nil, drain.AnnotationSchedulableBefore: nil} // back from the reboot: the slot stays
	// where is a record: its intent, and "cordoned" while it holds the cordon.
	where := func(r map[string]string) string {
		if _, cordon := k.RecordHolds(r); cordon {
			return r[k.Wanted()] + " cordoned"
		}
		return r[k.Wanted()]
	}
	rebootCordoned, rebootOnly, rest := string(IntentReboot)+" cordoned", string(IntentReboot), string(IntentStabilize)
	for i, tc := range []struct {
		name      string
		first     map[string]any // written answered, before
		change    map[string]any // written with the fault
		patch     string
		readFails bool
		made      bool
		mem       string // where the copy is after
		stored    string // where the ConfigMap is, before the copy is sent again
		unsure    bool
	}{
		{"landed, its answer lost: taken", held, lifted, "lose", false, true, rest, rest, false},
		{"landed, not read back, an uncordon that finishes: the cordon and the slot kept", held, lifted, "lose", true, false, rebootCordoned, rest, true},
		{"landed, not read back, the uncordon of a node back (the slot stays): the cordon kept", held, uncordoned, "lose", true, false, rebootCordoned, rebootOnly, true},
		{"landed, not read back, a cordon: kept", lifted, held, "lose", true, false, rebootCordoned, rebootCordoned, true},
		{"not sent, a cordon: kept, sent again", lifted, held, "drop", false, false, rebootCordoned, rest, true},
		{"not sent, an uncordon: the cordon kept", held, lifted, "drop", false, false, rebootCordoned, rebootCordoned, true},
	} {
		node := fmt.Sprintf("fate-%d", i)
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.setNode(t.Context(), node, keys, tc.first, k.RecordLetsGo); err != nil {
				t.Fatal(err)
			}
			fault.arm(tc.patch, tc.readFails)
			_, err := s.setNode(t.Context(), node, keys, tc.change, k.RecordLetsGo)
			if (err == nil) != tc.made {
				t.Fatalf("setNode error %v; want made %v", err, tc.made)
			}
			if got := where(s.nodeRecord(node)); got != tc.mem {
				t.Errorf("the controller's copy: %q, want %q", got, tc.mem)
			}
			if got := where(stored(node)); got != tc.stored {
				t.Errorf("the ConfigMap: %q, want %q", got, tc.stored)
			}
			if s.isUnsure(node) != tc.unsure {
				t.Fatalf("unsure %v, want %v", s.isUnsure(node), tc.unsure)
			}
			if err := s.resend(t.Context(), node, k.RecordLetsGo); err != nil {
				t.Fatal(err)
			}
			if got, mem := stored(node), s.nodeRecord(node); !maps.Equal(got, mem) || s.isUnsure(node) {
				t.Errorf("after the copy was sent again: the ConfigMap %v, the copy %v, unsure %v", got, mem, s.isUnsure(node))
			}
		})
	}
}

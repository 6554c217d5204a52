package updateoperator

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"slipway.dev/slipway/ops/drain"
)

// loseAnswer is a transport that sends a request the API server applies,
// then loses its answer: the first PATCH of a Node whose body says
// perform-update and cordons it (the controller's cordon with
// perform-update), as a connection dropped after the request went out.
type loseAnswer struct {
	next http.RoundTripper
	mu   sync.Mutex
	lost []string // the Nodes whose answer was lost
}

func (l *loseAnswer) wrap(rt http.RoundTripper) http.RoundTripper { l.next = rt; return l }

func (l *loseAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/nodes/") && req.Body != nil {
		b, err := peekBody(req)
		if err != nil {
			return nil, err
		}
		body = b
	}
	resp, err := l.next.RoundTrip(req)
	if err != nil || body == nil || !bytes.Contains(body, []byte(`"unschedulable":true`)) || !bytes.Contains(body, []byte(string(IntentPerform))) {
		return resp, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lost) > 0 || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	node := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]
	l.lost = append(l.lost, node)
	return nil, errors.New("read: connection reset by peer (the test lost the answer)")
}

func (l *loseAnswer) lostOn() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lost...)
}

// The API server applies the controller's cordon with perform-update, but
// its answer is lost (a connection dropped after the request went out).
// The controller must not take the cordon for unwritten: before, it put
// its record back, failed the update (reset-state while the agent
// performed), never lifted the cordon it did not know it held and
// started the next node beside it (two in flight at max-concurrent 1,
// the first left cordoned for good). Read back, the cordon is known:
// the update goes on, no failure, nothing left cordoned, never more than
// one node in flight.
func TestLostCordonAnswerIsReadBack(t *testing.T) {
	f := newFleet(t, "lostans", 2)
	lose := &loseAnswer{}
	stopWatch, most := watchInFlight(t, f)
	defer stopWatch()
	stop := f.controller(func(o *ControllerOptions) {
		cfg := *o.Config
		cfg.Wrap(lose.wrap)
		o.Config = &cfg
	})
	defer stop()
	eventually(t, 3*time.Minute, "both nodes at v2, at rest, uncordoned", func() (bool, string) {
		if seen := most(); seen > 1 { // fails at once: the first node would stay cordoned for good
			t.Fatalf("%d nodes in flight at once at max-concurrent 1 (answers lost: %v)", seen, lose.lostOn())
		}
		var behind []string
		for _, name := range f.nodes {
			n := f.node(name)
			v := f.keys.View(n, "")
			if f.version(name) != "v2" || v.Wanted != IntentStabilize || n.Spec.Unschedulable || drain.CordonedBy(n.Annotations) != "" {
				behind = append(behind, fmt.Sprintf("%s: %s wanted %s unschedulable %t cordoned-by %q", name, f.version(name), v.Wanted, n.Spec.Unschedulable, drain.CordonedBy(n.Annotations)))
			}
		}
		return len(behind) == 0, strings.Join(behind, "; ")
	})
	lost := lose.lostOn()
	if len(lost) != 1 {
		t.Fatalf("answers lost: %v; want the first cordon's (the case was not exercised)", lost)
	}
	if seen := most(); seen > 1 {
		t.Errorf("%d nodes in flight at once at max-concurrent 1", seen)
	}
	if r := f.eventReasons(lost[0]); has(r, ReasonFailed) {
		t.Errorf("the update of %s, whose cordon's answer was lost, failed: Events %v", lost[0], r)
	}
}

// watchInFlight counts the most nodes of f in flight at once, by the
// Nodes' own annotations (as the chaos monitor counts), until stop.
func watchInFlight(t *testing.T, f *fleet) (stop func(), most func() int) {
	var mu sync.Mutex
	seen := 0
	quit, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
			inflight := 0
			for _, name := range f.nodes {
				n, err := f.kube.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
				if err == nil && InFlight(f.keys.View(n, "")) {
					inflight++
				}
			}
			mu.Lock()
			seen = max(seen, inflight)
			mu.Unlock()
		}
	}()
	return func() { close(quit); <-watched }, func() int { mu.Lock(); defer mu.Unlock(); return seen }
}

// A failed write's fate and what the record does with it.
func TestJudgeWrite(t *testing.T) {
	gr := schema.GroupResource{Resource: "nodes"}
	conflict := apierrors.NewConflict(gr, "n", errors.New("changed"))
	forbidden := apierrors.NewForbidden(gr, "n", errors.New("no"))
	timeout := apierrors.NewTimeoutError("etcd", 1)         // 504: may have been applied
	internal := apierrors.NewInternalError(errors.New("x")) // 500
	reqTimeout := apierrors.NewGenericServerResponse(http.StatusRequestTimeout, "PATCH", gr, "n", "", 0, false)
	tooMany := apierrors.NewTooManyRequests("slow down", 1)
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "n", nil)
	reset := errors.New("read: connection reset by peer")
	readErr := errors.New("dial: connection refused")
	for _, c := range []struct {
		name         string
		werr, rerr   error
		landed       bool
		want         WriteFate
		undo, undoIf bool // undo with keepUnknown true / false
	}{
		{"conflict: maybe the answer to a second try of a write that landed", conflict, nil, false, WriteNotLanded, false, true},
		{"conflict, landed", conflict, nil, true, WriteLanded, false, false},
		{"429 is no refusal", tooMany, readErr, false, WriteUnknown, false, true},
		{"invalid", invalid, nil, false, WriteRefused, true, true},
		{"forbidden", fmt.Errorf("cordon: %w", forbidden), nil, true, WriteRefused, true, true},
		{"answer lost, landed", reset, nil, true, WriteLanded, false, false},
		{"answer lost, not seen (it may land still)", reset, nil, false, WriteNotLanded, false, true},
		{"answer lost, no read", reset, readErr, false, WriteUnknown, false, true},
		{"504, landed", timeout, nil, true, WriteLanded, false, false},
		{"500, not seen", internal, nil, false, WriteNotLanded, false, true},
		{"408 is no refusal", reqTimeout, readErr, false, WriteUnknown, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := JudgeWrite(c.werr, c.rerr, c.landed)
			if got != c.want {
				t.Fatalf("JudgeWrite = %s, want %s", got, c.want)
			}
			if u := UndoRecord(got, true); u != c.undo {
				t.Errorf("UndoRecord(%s, keep unknown) = %v, want %v", got, u, c.undo)
			}
			if u := UndoRecord(got, false); u != c.undoIf {
				t.Errorf("UndoRecord(%s, undo unknown) = %v, want %v", got, u, c.undoIf)
			}
		})
	}
}

// Whether a Node read back carries a write.
func TestCarries(t *testing.T) {
	owner := "slipway-update-operator"
	node := func(unsched bool, ann map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: ann, Labels: map[string]string{"l": "1"}}, Spec: corev1.NodeSpec{Unschedulable: unsched}}
	}
	cordoned := node(true, map[string]string{drain.AnnotationCordonedBy: owner, "w": "perform-update", "t": "10:00"})
	for _, c := range []struct {
		name string
		got  bool
		want bool
	}{
		{"nil node", Carries(nil, nil, nil), false},
		{"values as written", Carries(cordoned, map[string]any{"l": "1"}, map[string]any{"w": "perform-update", "gone": nil}), true},
		{"a value differs", Carries(cordoned, nil, map[string]any{"w": "reboot-update"}), false},
		{"a removed key still there", Carries(cordoned, nil, map[string]any{"t": nil}), false},
		{"a label missing", Carries(cordoned, map[string]any{"x": "1"}, nil), false},
		{"cordon with its intent", CarriesCordon(cordoned, owner, map[string]string{"w": "perform-update", "t": "10:00"}), true},
		{"cordon, an older intent", CarriesCordon(cordoned, owner, map[string]string{"w": "perform-update", "t": "10:01"}), false},
		{"another owner's cordon", CarriesCordon(cordoned, "someone", nil), false},
		{"record but schedulable", CarriesCordon(node(false, map[string]string{drain.AnnotationCordonedBy: owner}), owner, nil), false},
		{"uncordon landed", CarriesUncordon(node(false, map[string]string{"w": "reset-state"}), owner, drain.Meta{Annotations: map[string]any{"w": "reset-state"}}), true},
		{"uncordon not landed", CarriesUncordon(cordoned, owner, drain.Meta{Annotations: map[string]any{"w": "perform-update"}}), false},
		{"cordon gone, its write not", CarriesUncordon(node(false, map[string]string{"w": "perform-update"}), owner, drain.Meta{Annotations: map[string]any{"w": "reset-state"}}), false},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
}

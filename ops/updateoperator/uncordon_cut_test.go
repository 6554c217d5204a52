package updateoperator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/drain"
)

// cutAtUncordon is a transport that stops a controller at the Node write
// lifting its cordon of node, as a process killed there would: that
// request is dropped unsent (sent: it is applied and its answer lost),
// the controller's context ends, and from then on no request of it
// reaches the API server (the undo of its record write included), as
// none of a killed process does.
type cutAtUncordon struct {
	next   http.RoundTripper
	node   string
	send   bool // the uncordon reaches the API server before the cut
	cancel context.CancelFunc
	mu     sync.Mutex
	cut    bool
}

func (c *cutAtUncordon) wrap(rt http.RoundTripper) http.RoundTripper { c.next = rt; return c }

func (c *cutAtUncordon) isCut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut
}

func (c *cutAtUncordon) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil, errors.New("dial: connection refused (the test cut the controller off)")
	}
	if req.Method != http.MethodPatch || !strings.HasSuffix(req.URL.Path, "/nodes/"+c.node) || req.Body == nil {
		return c.next.RoundTrip(req)
	}
	body, err := peekBody(req)
	if err != nil {
		return nil, err
	}
	var p struct {
		Metadata struct {
			Annotations map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(body, &p)
	if v, ok := p.Metadata.Annotations[drain.AnnotationCordonedBy]; !ok || v != nil {
		return c.next.RoundTrip(req)
	}
	c.cut = true
	defer c.cancel()
	if c.send { // before the cancel, which would end the request too
		resp, err := c.next.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("the uncordon the test let through was answered %s", resp.Status)
		}
	}
	return nil, fmt.Errorf("%w (the test stopped the controller at its uncordon)", context.Canceled)
}

// A leader stopped at a node's uncordon (killed, or cut off from the API
// server by its Lease's fence) leaves its record to the next leader. The
// uncordon's record write went before its Node write: before, it dropped
// the cordon from the record, so a leader stopped between the two left a
// record without the cordon the Node still carried; the next leader took
// it for someone else's (an admin's) and never lifted it. The record now
// keeps the cordon until the Node's uncordon is known, and drops it by a
// second write after it: the next leader lifts a cordon the Node still
// carries; finds one already lifted (the leader stopped after the Node
// write) and drops it from the record; and never lifts one that is not
// the operator's (an admin's, made after the operator's was lifted), only
// drops its own from the record.
func TestUncordonCutThenNewLeader(t *testing.T) {
	for i, c := range []struct {
		name string
		send bool // the uncordon reaches the Node before the leader stops
		// adminCordon: an admin cordons the node before the next leader
		// starts (kubectl cordon: no owner recorded).
		adminCordon bool
	}{
		{name: "stopped before the Node write"},
		{name: "stopped after the Node write", send: true},
		{name: "stopped after the Node write, then an admin's cordon", send: true, adminCordon: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFleet(t, fmt.Sprintf("uncut%d", i), 1)
			node := f.nodes[0]
			ctx, cancel := context.WithCancel(context.Background())
			cut := &cutAtUncordon{node: node, send: c.send, cancel: cancel}
			done := f.run(ctx, cut.wrap, func(err error) bool { return cut.isCut() })
			t.Cleanup(func() { cancel(); <-done })
			select { // the first leader stops at the uncordon
			case <-done:
			case <-time.After(4 * time.Minute):
				t.Fatalf("the uncordon was not reached; %s", describe(f))
			}
			if !cut.isCut() {
				t.Fatalf("the first leader ended without reaching the uncordon; %s", describe(f))
			}
			n := f.node(node)
			if got := drain.CordonedBy(n.Annotations) != ""; got == c.send {
				t.Fatalf("after the cut: the Node carries a cordon record %v, want %v (the case was not exercised); %s", got, !c.send, describe(f))
			}
			if c.adminCordon {
				f.patch(node, map[string]any{"spec": map[string]any{"unschedulable": true}})
			}

			// The next leader (stopped by the test maybe before it has
			// started: its context's end is then its error).
			nctx, ncancel := context.WithCancel(context.Background())
			ndone := f.run(nctx, nil, func(err error) bool { return errors.Is(err, context.Canceled) })
			defer func() { ncancel(); <-ndone }()
			if !c.adminCordon {
				eventually(t, 3*time.Minute, "the node at v2, at rest, uncordoned", func() (bool, string) {
					if ok, why := f.done(); !ok {
						return false, why + "; " + describe(f)
					}
					return true, ""
				})
			}
			eventually(t, 3*time.Minute, "the record without the cordon or a slot", func() (bool, string) {
				r := f.storedRecord(node)
				if slot, cordon := f.keys.RecordHolds(r); slot || cordon {
					return false, fmt.Sprintf("the record holds slot %v cordon %v: %v", slot, cordon, r)
				}
				return true, ""
			})
			if c.adminCordon {
				// The record let go of the operator's cordon: nothing of
				// the controller lifts the Node's (the admin's), turn
				// after turn (one a second).
				time.Sleep(3 * time.Second)
				n := f.node(node)
				if !n.Spec.Unschedulable || drain.CordonedBy(n.Annotations) != "" {
					t.Errorf("the admin's cordon was lifted or taken over: unschedulable %v, cordoned-by %q", n.Spec.Unschedulable, drain.CordonedBy(n.Annotations))
				}
				if w := f.keys.View(n, "").Wanted; w != IntentStabilize {
					t.Errorf("the node wants %s, want %s (its update finished)", w, IntentStabilize)
				}
			}
		})
	}
}

// storedRecord is node's record in the fleet state ConfigMap, as the next
// leader would load it.
func (f *fleet) storedRecord(node string) map[string]string {
	cm, err := f.kube.CoreV1().ConfigMaps("default").Get(context.Background(), FleetStateName(f.prefix), metav1.GetOptions{})
	if err != nil {
		f.t.Fatalf("read the fleet state: %v", err)
	}
	r, _, err := parseRecords(cm.Data)
	if err != nil {
		f.t.Fatal(err)
	}
	return r[node]
}

// run runs a controller of the tests' settings, its client's transport
// wrapped by wrap (nil: as it is), until ctx ends; the channel closes
// when it returned. An error it returns fails the test unless expected
// says it is (nil: none is).
func (f *fleet) run(ctx context.Context, wrap func(http.RoundTripper) http.RoundTripper, expected func(error) bool) chan struct{} {
	o := f.controllerOptions(func(o *ControllerOptions) {
		if wrap != nil {
			cfg := *o.Config
			cfg.Wrap(wrap)
			o.Config = &cfg
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := RunController(ctx, o); err != nil && (expected == nil || !expected(err)) {
			f.t.Errorf("controller: %v", err)
		}
	}()
	return done
}

// peekBody reads req's body and puts it back, for a transport that looks
// at a request before it sends it.
func peekBody(req *http.Request) ([]byte, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(body))
	return body, nil
}

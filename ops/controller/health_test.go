package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
)

func TestNextInLine(t *testing.T) {
	behind := []plan.Node{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}, {Name: "e"}}
	all := map[string]bool{"a": true, "b": true, "c": true, "d": true, "e": true}
	for _, tc := range []struct {
		name      string
		checked   map[string]*v1.SkippedNode
		startable map[string]bool
		ahead     int
		want      []string
	}{
		{"the first ones when none is checked", nil, all, 2, []string{"a", "b"}},
		{"past the ones this pass checked", map[string]*v1.SkippedNode{"a": nil, "b": {Node: "b"}}, all, 2, []string{"c", "d"}},
		{"not a node that may not start now (a failed one in its backoff)", nil, map[string]bool{"a": true, "c": true, "e": true}, 2, []string{"a", "c"}},
		{"fewer when the line is short", map[string]*v1.SkippedNode{"a": nil, "b": nil, "c": nil}, all, 5, []string{"d", "e"}},
		{"none asked", nil, all, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextInLine(behind, tc.checked, tc.startable, tc.ahead); !slices.Equal(got, tc.want) {
				t.Errorf("nextInLine = %v, want %v", got, tc.want)
			}
		})
	}
}

// A check made ahead that no pass has taken yet is not made again (each
// pass asks for the nodes next in line until one frees a slot), and a
// deleted channel's checks are dropped with the rest of its memory.
func TestChecksAheadNotRepeatedAndForgotten(t *testing.T) {
	a := &Controller{opts: Options{Resync: time.Minute}}
	ca := &a.ahead
	ca.underWay, ca.slots = map[string]bool{}, make(chan struct{}, 1)
	ca.done = map[string]map[string]checked{"c": {"n1": {at: time.Now()}}}
	ca.slots <- struct{}{} // a check started anyway waits here, never reaching the API
	a.checkAhead(context.Background(), &fleetCache{}, "c", []string{"n1", "n2"})
	ca.mu.Lock()
	again, other := ca.underWay["n1"], ca.underWay["n2"]
	ca.mu.Unlock()
	if again || !other {
		t.Errorf("under way: n1 %v (done, not taken: want false), n2 %v (want true)", again, other)
	}
	ca.forget("c")
	if _, kept := ca.done["c"]; kept {
		t.Errorf("checks of a deleted channel kept: %v", ca.done)
	}
}

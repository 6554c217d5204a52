package agent

import (
	"slices"
	"testing"

	"slipway.dev/slipway/ops/agent/plan"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
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

package updateoperator

import (
	"fmt"
	"testing"
	"time"

	"slipway.dev/slipway/ops/drain"
)

// Each prefix records its cordons under an owner of its own; a record of
// the shared owner older versions wrote is this prefix's only beside this
// prefix's drain-started.
func TestCordonOwnerPerPrefix(t *testing.T) {
	def, _ := NewKeys("")
	br, _ := NewKeys(BottlerocketPrefix)
	if def.CordonOwner() != CordonOwner {
		t.Errorf("default prefix owner %q, want %q (unchanged: cordons recorded before stay the operator's)", def.CordonOwner(), CordonOwner)
	}
	rec := func(by string, kv ...string) map[string]string {
		a := map[string]string{drain.AnnotationCordonedBy: by}
		for i := 0; i+1 < len(kv); i += 2 {
			a[kv[i]] = kv[i+1]
		}
		return a
	}
	for _, c := range []struct {
		name string
		k    Keys
		a    map[string]string
		want bool
	}{
		{"default prefix, its owner", def, rec(CordonOwner), true},
		{"another prefix's owner is not the default's", def, rec(br.CordonOwner()), false},
		{"bottlerocket prefix, its owner", br, rec(br.CordonOwner()), true},
		{"the default prefix's cordon is not bottlerocket's", br, rec(CordonOwner), false},
		{"an older version's shared owner, this prefix's drain under way", br, rec(CordonOwner, br.Key(KeyDrainStarted), "2026-01-01T00:00:00Z"), true},
		{"the shared owner beside another prefix's drain", br, rec(CordonOwner, def.Key(KeyDrainStarted), "2026-01-01T00:00:00Z"), false},
		{"an admin's cordon", br, rec(""), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.k.cordonedByUs(c.a); got != c.want {
				t.Errorf("cordonedByUs(%v) under %s = %v, want %v", c.a, c.k.Prefix, got, c.want)
			}
		})
	}
}

// Two operators of different prefixes in one cluster (one per OS family,
// say) each read every Node: neither lifts the other's cordon. The first
// holds its node drained behind a before-reboot hook while the second
// rolls its own node; the hold's cordon stays.
func TestTwoPrefixesKeepTheirOwnCordons(t *testing.T) {
	a, b := newFleet(t, "prefa", 1), newFleet(t, "prefb", 1)
	held := a.nodes[0]
	const hook = "hold.example/ok"
	stopA := a.controller(func(o *ControllerOptions) { o.BeforeRebootChecks = []string{hook} })
	defer stopA()
	eventually(t, time.Minute, held+" drained, waiting for its before-reboot hook", func() (bool, string) {
		n := a.node(held)
		return n.Labels[a.keys.Key(KeyBeforeReboot)] == "true" && n.Spec.Unschedulable, fmt.Sprintf("unschedulable %v", n.Spec.Unschedulable)
	})
	stopB := b.controller(nil)
	defer stopB()
	eventually(t, 90*time.Second, "the second operator's node updated", b.done)
	if n := a.node(held); !n.Spec.Unschedulable || drain.CordonedBy(n.Annotations) != a.keys.CordonOwner() {
		t.Fatalf("%s: unschedulable %v, cordoned by %q: the other operator lifted its cordon mid-update", held, n.Spec.Unschedulable, drain.CordonedBy(n.Annotations))
	}
	a.patch(held, map[string]any{"metadata": map[string]any{"annotations": map[string]any{hook: "true"}}})
	eventually(t, 90*time.Second, "the held node updated once its hook said yes", a.done)
}

package kube

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
)

// The scheme holds the groups slipway uses and no more: each group more is
// memory every agent pays at start.
func TestSchemeHoldsOnlyTheGroupsUsed(t *testing.T) {
	got := sets.New[string]()
	for gvk := range Scheme.AllKnownTypes() {
		if gvk.Version != runtime.APIVersionInternal { // watch events' internal form
			got.Insert(gvk.GroupVersion().String())
		}
	}
	want := []string{"apiextensions.k8s.io/v1", "apps/v1", "batch/v1", "coordination.k8s.io/v1", "policy/v1", "v1"}
	if g := sets.List(got); !slices.Equal(g, want) {
		t.Errorf("Scheme's group versions = %v, want %v", g, want)
	}
}

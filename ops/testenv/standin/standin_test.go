package standin

import (
	"slices"
	"testing"
)

func TestSample(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	for _, tc := range []struct {
		every         int
		real, standIn []string
	}{
		{2, []string{"n1", "n3", "n5"}, []string{"n2", "n4"}},
		{1, nodes, nil},
		{0, nil, nodes},
		{50, []string{"n1"}, []string{"n2", "n3", "n4", "n5"}},
	} {
		real, standIn := Sample(nodes, tc.every)
		if !slices.Equal(real, tc.real) || !slices.Equal(standIn, tc.standIn) {
			t.Errorf("Sample(every %d) = %v, %v; want %v, %v", tc.every, real, standIn, tc.real, tc.standIn)
		}
	}
}

package cli

import (
	"reflect"
	"testing"
)

func TestLineDiff(t *testing.T) {
	tests := []struct {
		a, b, want []string
	}{
		{[]string{"a", "b", "c"}, []string{"a", "x", "c"}, []string{"  a", "- b", "+ x", "  c"}},
		{nil, []string{"a"}, []string{"+ a"}},
		{[]string{"a"}, nil, []string{"- a"}},
		{[]string{"a", "b"}, []string{"a", "b"}, []string{"  a", "  b"}},
		{[]string{"image: v1", "name: x"}, []string{"image: v2", "name: x", "port: 1"}, []string{"- image: v1", "+ image: v2", "  name: x", "+ port: 1"}},
	}
	for _, tt := range tests {
		if got := LineDiff(tt.a, tt.b); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("LineDiff(%q, %q) = %q, want %q", tt.a, tt.b, got, tt.want)
		}
	}
}

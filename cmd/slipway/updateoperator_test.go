package main

import (
	"reflect"
	"testing"
)

func TestOldOperatorArgs(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string
	}{
		{[]string{"/bin/dogswatch", "-controller"}, []string{"slipway", "update-operator", "controller", "--prefix", "bottlerocket.aws"}},
		{[]string{"bottlerocket-update-operator", "-agent", "-nodeName", "ip-10-0-0-1", "-debug"},
			[]string{"slipway", "--debug", "update-operator", "agent", "--prefix", "bottlerocket.aws", "--node-name", "ip-10-0-0-1"}},
		{[]string{"dogswatch", "-agent", "-prefix=thar.amazonaws.com", "-kubeconfig=/k"},
			[]string{"slipway", "update-operator", "agent", "--prefix=thar.amazonaws.com", "--kubeconfig=/k"}},
	} {
		got, ok := oldOperatorArgs(tc.in)
		if !ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("oldOperatorArgs(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
	if _, ok := oldOperatorArgs([]string{"slipway", "-agent"}); ok {
		t.Error("slipway's own name was rewritten")
	}
	app := newApp()
	got := dispatchArgs(app, []string{"dogswatch", "-agent"})
	if want := []string{"slipway", "update-operator", "agent", "--prefix", "bottlerocket.aws"}; !reflect.DeepEqual(got, want) {
		t.Errorf("dispatchArgs = %q, want %q", got, want)
	}
}

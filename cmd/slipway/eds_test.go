package main

import (
	"strings"
	"testing"
)

func TestKubectlEDSFlagsBeforeAndAfterTheName(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"kubectl-eds", "pods", "agent", "-n", "ops", "-o", "yaml", "--kubeconfig", "/nonexistent"}, "no cluster to talk to"},
		{[]string{"kubectl-eds", "-n", "ops", "canary", "validate", "agent", "--kubeconfig=/nonexistent"}, "no cluster to talk to"},
		{[]string{"kubectl-eds", "get", "-A", "--kubeconfig", "/nonexistent"}, "no cluster to talk to"},
		{[]string{"kubectl-eds", "pods", "agent", "--bogus"}, `"--bogus" is not a flag`},
		{[]string{"kubectl-eds", "pods", "agent", "other"}, "takes one ExtendedDaemonSet name"},
		{[]string{"kubectl-eds", "get", "-o", "xml"}, "unknown output format"},
		{[]string{"kubectl-eds", "pods", "agent", "-n"}, "needs a value"},
	}
	for _, tt := range tests {
		app := newApp()
		err := app.Run(dispatchArgs(app, tt.args))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}

func TestEDSManifestCommand(t *testing.T) {
	app := newApp()
	var out strings.Builder
	app.Writer = &out
	if err := app.Run([]string{"slipway", "eds", "manifest", "--manifest-namespace", "ops", "--image", "img:1"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "kind: Deployment") || !strings.Contains(out.String(), "extendeddaemonsets.eds.slipway.dev") {
		t.Errorf("manifest output:\n%.400s", out.String())
	}
}

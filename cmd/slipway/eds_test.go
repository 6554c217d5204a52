package main

import (
	"os"
	"path/filepath"
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
		// kubectl's connection flags reach the client.
		{[]string{"kubectl-eds", "get", "agent", "--server", "http://127.0.0.1:1", "--token", "t", "--as", "someone", "--kubeconfig", "EMPTY"}, "127.0.0.1:1"},
		{[]string{"kubectl-eds", "--context", "elsewhere", "get", "--kubeconfig", "/nonexistent"}, "no cluster to talk to"},
		{[]string{"kubectl-eds", "pods", "agent", "--insecure-skip-tls-verify", "-s", "http://127.0.0.1:1", "--kubeconfig", "EMPTY"}, "127.0.0.1:1"},
	}
	empty := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(empty, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		for i, a := range tt.args {
			if a == "EMPTY" {
				tt.args[i] = empty
			}
		}
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

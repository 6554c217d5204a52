package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func testApp() *cli.App {
	leaf := func(name string, aliases ...string) *cli.Command { return &cli.Command{Name: name, Aliases: aliases} }
	return &cli.App{Name: "slipway", Commands: []*cli.Command{
		{Name: "ops", Subcommands: []*cli.Command{leaf("upgrade"), leaf("status"), leaf("version-check")}},
		{Name: "eds", Subcommands: []*cli.Command{leaf("plugin", "kubectl-eds")}},
		leaf("version"),
	}}
}

func TestDispatchArgs(t *testing.T) {
	cases := []struct {
		argv0 string
		args  []string
		want  []string
	}{
		{"slipway", []string{"ops", "upgrade"}, []string{"slipway", "ops", "upgrade"}},
		{"/usr/local/bin/slipway", []string{"version"}, []string{"/usr/local/bin/slipway", "version"}},
		{"/usr/bin/kubectl-eds", []string{"get", "x"}, []string{"slipway", "eds", "plugin", "get", "x"}},
		{"upgrade", []string{"--version", "v2"}, []string{"slipway", "ops", "upgrade", "--version", "v2"}},
		{"ops-status", []string{"--json"}, []string{"slipway", "ops", "status", "--json"}},
		{"slipway-ops-upgrade", nil, []string{"slipway", "ops", "upgrade"}},
		{"slipway-version", nil, []string{"slipway", "version"}},
		{"ops", []string{"status"}, []string{"slipway", "ops", "status"}},
		{"bash", []string{"-c", "x"}, []string{"bash", "-c", "x"}},
		{"slipway-nothing", nil, []string{"slipway-nothing"}},
	}
	for _, tc := range cases {
		got := dispatchArgs(testApp(), append([]string{tc.argv0}, tc.args...))
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("argv0 %q args %q: got %q, want %q", tc.argv0, tc.args, got, tc.want)
		}
	}
}

// TestMultiCallSymlink builds the real binary, links it under a command's
// name and checks that the link runs that command.
func TestMultiCallSymlink(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "slipway")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	link := filepath.Join(dir, "slipway-version")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(link, "--json")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("run %s: %v\n%s", link, err, out.String())
	}
	if !strings.Contains(out.String(), `"version":`) {
		t.Fatalf("the symlink did not run `version --json`; output:\n%s", out.String())
	}
}

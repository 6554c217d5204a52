package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"slipway.dev/slipway/ops/drain"
)

func TestOldOperatorArgs(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string
	}{
		{[]string{"/bin/dogswatch", "-controller"}, []string{"slipway", "update-operator", "controller", "--prefix", "bottlerocket.aws"}},
		{[]string{"bottlerocket-update-operator", "-agent", "-nodeName", "ip-10-0-0-1", "-debug"},
			[]string{"slipway", "--debug", "update-operator", "agent", "--platform", "bottlerocket-api", "--prefix", "bottlerocket.aws", "--node-name", "ip-10-0-0-1"}},
		{[]string{"dogswatch", "-agent", "-prefix=thar.amazonaws.com", "-kubeconfig=/k"},
			[]string{"slipway", "update-operator", "agent", "--platform", "bottlerocket-api", "--prefix=thar.amazonaws.com", "--kubeconfig=/k"}},
		{[]string{"dogswatch", "-agent", "-platform=command"},
			[]string{"slipway", "update-operator", "agent", "--prefix", "bottlerocket.aws", "--platform=command"}},
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
	if want := []string{"slipway", "update-operator", "agent", "--platform", "bottlerocket-api", "--prefix", "bottlerocket.aws"}; !reflect.DeepEqual(got, want) {
		t.Errorf("dispatchArgs = %q, want %q", got, want)
	}
}

// The controller's drain flags default to what the Bottlerocket update
// operator drains; each can be turned off.
func TestControllerDrainDefaults(t *testing.T) {
	parse := func(args ...string) drain.Options {
		var got drain.Options
		app := &cli.App{Commands: []*cli.Command{{Name: "c", Flags: uoDrainFlags(), Action: func(c *cli.Context) error {
			got = uoDrainOptions(c)
			return nil
		}}}}
		if err := app.Run(append([]string{"slipway", "c"}, args...)); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if d := parse(); !d.DeleteEmptyDirData || !d.EvictUnmanaged || d.Force || d.GracePeriodSeconds != nil || d.Timeout != 10*time.Minute {
		t.Errorf("default drain %+v: want emptyDir and unowned pods evicted, nothing forced, the pods' own grace period, 10m", d)
	}
	if d := parse("--drain-delete-emptydir=false", "--drain-unmanaged=false", "--drain-force", "--drain-grace-period", "30"); d.DeleteEmptyDirData || d.EvictUnmanaged || !d.Force || d.GracePeriodSeconds == nil || *d.GracePeriodSeconds != 30 {
		t.Errorf("drain with every flag turned: %+v", d)
	}
}

// The command platform without --version-command is refused at the
// agent's start with the flag named: without it the agent cannot tell the
// version chosen from a fallback boot, and every update that succeeded
// was counted a failure (and its host reset).
func TestCommandPlatformNeedsVersionCommand(t *testing.T) {
	platformOf := func(args ...string) error {
		var perr error
		app := &cli.App{Commands: []*cli.Command{{Name: "agent", Flags: uoAgentCommand().Flags, Action: func(c *cli.Context) error {
			_, perr = uoPlatform(c)
			return nil
		}}}}
		if err := app.Run(append([]string{"slipway", "agent"}, args...)); err != nil {
			t.Fatal(err)
		}
		return perr
	}
	base := []string{"--platform", "command", "--check-command", "osupdate check", "--prepare-command", "osupdate download",
		"--apply-command", "osupdate apply", "--reboot-command", "osupdate reboot"}
	err := platformOf(base...)
	if err == nil || !strings.Contains(err.Error(), "--version-command") {
		t.Errorf("the command platform without --version-command: %v; want a refusal naming --version-command", err)
	}
	if err := platformOf(append(base, "--version-command", "osupdate version")...); err != nil {
		t.Errorf("the command platform with every command: %v", err)
	}
}

package upgrade_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
)

// The command line maps flags and SLIPWAY_* variables onto the upgrade.
func TestCommandLine(t *testing.T) {
	e := newEnv(t)
	// Environment instead of flags; --k3s alone upgrades k3s only.
	cmd := exec.Command(slipwayBin, "ops", "upgrade", "--k3s", "--json")
	cmd.Env = append(os.Environ(), "SLIPWAY_SYSTEM_DIR="+e.sys, "SLIPWAY_SOURCE="+e.mirror, "SLIPWAY_ARCH="+arch,
		"SLIPWAY_LOCK_FILE="+e.lock, "SLIPWAY_REBOOT=false", "SLIPWAY_VERSION=v1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var res upgrade.Result
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	if len(res.Components) != 1 || res.Components[0].Component != layout.K3s || res.Components[0].To != "v1-k3s1" {
		t.Fatalf("--k3s alone: %+v", res.Components)
	}
	if _, err := os.Stat(filepath.Join(e.sys, "k3os")); !os.IsNotExist(err) {
		t.Fatal("--k3s alone installed the rootfs")
	}

	// --dry-run --json: the plan, and nothing changes.
	before := treeDigest(t, e.sys)
	out, err = e.cmd("--version", "v2", "--dry-run", "--json").Output()
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	res = upgrade.Result{}
	if err := json.Unmarshal(out, &res); err != nil || !res.DryRun || len(res.Components) != 2 {
		t.Fatalf("dry run output %s: %v", out, err)
	}
	if treeDigest(t, e.sys) != before {
		t.Fatal("--dry-run changed the system directory")
	}

	// Exit codes.
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--version", "v9"}, upgrade.ExitNotFound},
		{[]string{"--version", "v1", "--source", "ftp://nowhere"}, upgrade.ExitUsage},
	} {
		err := e.cmd(tc.args...).Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
			t.Errorf("%v: %v, want exit %d", tc.args, err, tc.code)
		}
	}

	out, err = exec.Command(slipwayBin, "ops", "status", "--system-dir", e.sys, "--json").Output()
	var st upgrade.StatusReport
	if err != nil || json.Unmarshal(out, &st) != nil || len(st.Components) != 3 || st.Components[2].Current != "v1-k3s1" {
		t.Fatalf("status --json: %v %s", err, out)
	}
}

package upgrade_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// A new user trying `ops upgrade` on a directory of their workstation must
// not reboot the workstation: with no --reboot flag, a reboot follows only
// when the system directory is the one the host booted from, and the user is
// told why none follows. An explicit --reboot still reboots.
func TestNoRebootUnlessBootedFromIt(t *testing.T) {
	e := newEnv(t)
	mark := filepath.Join(t.TempDir(), "rebooted")
	upgradeTo := func(version string, extra ...string) (string, error) {
		args := append([]string{"ops", "upgrade", "--system-dir", e.sys, "--source", e.mirror, "--arch", arch,
			"--lock-file", e.lock, "--version", version, "--reboot-delay", "0s", "--reboot-command", "touch " + mark}, extra...)
		out, err := exec.Command(slipwayBin, args...).CombinedOutput()
		return string(out), err
	}
	out, err := upgradeTo("v1")
	if err != nil {
		t.Fatalf("upgrade without --reboot: %v\n%s", err, out)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("rebooted after upgrading a directory this host did not boot from")
	}
	if !strings.Contains(out, "no reboot will follow") || !strings.Contains(out, "--reboot") {
		t.Errorf("output does not say that no reboot follows, and how to ask for one:\n%s", out)
	}
	if out, err := upgradeTo("v2", "--reboot"); err != nil {
		t.Fatalf("upgrade with --reboot: %v\n%s", err, out)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Error("an explicit --reboot did not reboot")
	}
}

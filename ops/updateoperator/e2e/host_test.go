package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSimulatedHostSwitchesAtBoot: the fake node's host runs a new version
// only after a reboot, as a real one does. perform-update (apply.sh) leaves
// the running version as it was, and so does an agent restarted within the
// boot; the next boot runs it; reset-state (reset.sh) discards an applied
// update, and the boot after it runs the old version still. A host that
// switched at apply let a node whose perform-update timed out report the
// target after reset-state, up to date without ever rebooting.
func TestSimulatedHostSwitchesAtBoot(t *testing.T) {
	scripts, node := t.TempDir(), t.TempDir()
	if err := writeScripts(scripts, "v2"); err != nil {
		t.Fatal(err)
	}
	boots := 0
	run := func(what string) string {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", "set -e; "+what) // #nosec G204 -- the test's own scripts
		cmd.Dir = node
		cmd.Env = append(os.Environ(), "NODE_NAME=node-1", "SLIPWAY_NODE_DIR="+node, "SLIPWAY_NODE_BOOT="+strconv.Itoa(boots))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", what, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	script := func(name string) string { return "/bin/sh " + filepath.Join(scripts, name) }
	boot := func() { // the supervisor empties /run, then the node's command starts
		t.Helper()
		boots++
		if err := os.RemoveAll(filepath.Join(node, "run")); err != nil {
			t.Fatal(err)
		}
		run(nodeStart + "true")
	}
	version := func(when, want string) {
		t.Helper()
		if got := run(script("version.sh")); got != want {
			t.Errorf("%s: the host runs %q, want %q", when, got, want)
		}
	}
	boot()
	version("first boot", "v1")
	run(script("prepare.sh") + " && " + script("apply.sh"))
	version("after perform-update", "v1")
	run(nodeStart + "true") // the agent restarted, same boot
	version("after the agent's restart within the boot", "v1")
	boot()
	version("after the reboot", "v2")

	if err := writeRelease(scripts, "v3"); err != nil {
		t.Fatal(err)
	}
	run(script("prepare.sh") + " && " + script("apply.sh") + " && " + script("reset.sh"))
	boot()
	version("after reset-state and a reboot", "v2")
}

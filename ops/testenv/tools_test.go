package testenv

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckToolsNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, binEtcd), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, binAPIServer), []byte("not executable"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := checkTools(dir, []string{binEtcd, binAPIServer, binKwok})
	if err == nil || !strings.Contains(err.Error(), "lacks kube-apiserver, kwok") || !strings.Contains(err.Error(), "scripts/install-tools") {
		t.Fatalf("checkTools: %v, want it to name kube-apiserver and kwok and say what to run", err)
	}
	if err := checkTools(dir, []string{binEtcd}); err != nil {
		t.Fatalf("checkTools with everything present: %v", err)
	}
}

// TestToolsDirRunsInstallTools finds the binaries through scripts/install-tools
// (building them if missing) when no directory is given.
func TestToolsDirRunsInstallTools(t *testing.T) {
	if os.Getenv(EnvSkip) == "1" || testing.Short() {
		t.Skip("SLIPWAY_SKIP_CLUSTER=1 or -short")
	}
	dir, err := toolsDir(context.Background(), "", true, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := os.Getenv(EnvToolsDir); want != "" && filepath.Clean(want) != filepath.Clean(dir) {
		t.Errorf("install-tools gave %s, SLIPWAY_TOOLS_DIR is %s", dir, want)
	}
}

package testenv

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

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

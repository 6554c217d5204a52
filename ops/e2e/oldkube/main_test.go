package oldkube

import (
	"fmt"
	"os"
	"testing"

	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/testenv"
)

var env *testenv.Env

// enabled says whether the old API server is asked for.
func enabled() bool {
	return os.Getenv(testenv.EnvOldKubeToolsDir) != "" || os.Getenv("SLIPWAY_OLD_KUBE") == "1"
}

func TestMain(m *testing.M) {
	if !enabled() {
		fmt.Fprintf(os.Stderr, "oldkube: skipped: set %s to the directory `scripts/install-tools --old-kube` prints, or SLIPWAY_OLD_KUBE=1 to build it\n",
			testenv.EnvOldKubeToolsDir)
		os.Setenv(testenv.EnvSkip, "1")
	}
	objs, err := crds.OfGroup("ops.slipway.dev")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testenv.RunMain(m, testenv.Options{OldKube: true, CRDs: objs}, &env)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

package testenv

import (
	"context"
	"fmt"
	"os"

	"slipway.dev/slipway/ops/testenv/tools"
)

// Binaries the harness runs, all found in one tools directory.
const (
	binEtcd              = "etcd"
	binAPIServer         = "kube-apiserver"
	binControllerManager = "kube-controller-manager"
	binScheduler         = "kube-scheduler"
	binKwok              = "kwok"
)

// OldKubeVersion is the kube-apiserver `scripts/install-tools --old-kube`
// builds: the Kubernetes of the last k3os releases (k3s 1.23).
const OldKubeVersion = "v1.23.17"

// EnvOldKubeToolsDir names the directory of that build (the last line of
// `scripts/install-tools --old-kube`), so that tests skip running the script.
const EnvOldKubeToolsDir = "SLIPWAY_OLD_KUBE_TOOLS_DIR"

// toolsDir returns the directory holding the control-plane binaries: dir when
// set (it must hold them all), else the output of scripts/install-tools, which
// builds what is missing. It never returns a directory that lacks a binary.
// old asks for kube-apiserver OldKubeVersion (with etcd): dir is then
// ignored, $SLIPWAY_OLD_KUBE_TOOLS_DIR or `scripts/install-tools --old-kube`
// gives the directory.
func toolsDir(ctx context.Context, dir string, cluster, old bool) (string, error) {
	need := []string{binEtcd, binAPIServer}
	if cluster {
		need = append(need, binControllerManager, binScheduler, binKwok)
	}
	var args []string
	if old {
		dir, args = os.Getenv(EnvOldKubeToolsDir), []string{"--old-kube"}
	}
	if dir == "" {
		var err error
		if dir, err = tools.Install(ctx, args...); err != nil {
			return "", fmt.Errorf("find the control-plane binaries: %w", err)
		}
	}
	return dir, tools.Check(dir, need...)
}

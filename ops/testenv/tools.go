package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	if dir != "" {
		return dir, checkTools(dir, need)
	}
	root, err := repoRoot()
	if err != nil {
		return "", fmt.Errorf("find the control-plane binaries: set SLIPWAY_TOOLS_DIR or run inside the checkout: %w", err)
	}
	script := filepath.Join(root, "scripts", "install-tools")
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, script, args...)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s failed (run it by hand to see why): %w\n%s", script, err, lastLines(errOut.Bytes(), 20))
	}
	lines := strings.Fields(strings.TrimSpace(out.String()))
	if len(lines) == 0 {
		return "", fmt.Errorf("%s printed no directory", script)
	}
	dir = lines[len(lines)-1]
	return dir, checkTools(dir, need)
}

// checkTools reports the binaries missing from dir.
func checkTools(dir string, need []string) error {
	var missing []string
	for _, b := range need {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("tools directory %s lacks %s: run scripts/install-tools and set SLIPWAY_TOOLS_DIR to the directory it prints", dir, strings.Join(missing, ", "))
	}
	return nil
}

// repoRoot walks up from the working directory to the directory holding
// scripts/install-tools (go test runs in the package's directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "install-tools")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no scripts/install-tools in any parent directory")
		}
		dir = parent
	}
}

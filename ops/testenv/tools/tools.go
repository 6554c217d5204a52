// Package tools finds the pinned binaries the tests and benchmarks run
// (kube-apiserver, kwok, helm, prometheus, ...): one directory, named by
// $SLIPWAY_TOOLS_DIR or printed by scripts/install-tools, which builds what
// is missing. It imports nothing of slipway, so any test helper can use it.
package tools

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

// EnvDir names the directory of the pinned binaries.
const EnvDir = "SLIPWAY_TOOLS_DIR"

// Dir is $SLIPWAY_TOOLS_DIR when set, else what Install prints.
func Dir(ctx context.Context) (string, error) {
	if dir := os.Getenv(EnvDir); dir != "" {
		return dir, nil
	}
	return Install(ctx)
}

// Install runs scripts/install-tools (with args, e.g. --old-kube) from the
// checkout, which builds what is missing, and returns the directory it
// prints last.
func Install(ctx context.Context, args ...string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("find the tools directory: set %s or run inside the checkout: %w", EnvDir, err)
	}
	script := filepath.Join(root, "scripts", "install-tools")
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, script, args...)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s failed (run it by hand to see why): %w\n%s", script, err, lastLines(errOut.Bytes(), 20))
	}
	fields := strings.Fields(strings.TrimSpace(out.String()))
	if len(fields) == 0 {
		return "", fmt.Errorf("%s printed no directory", script)
	}
	return fields[len(fields)-1], nil
}

// Binary is the path of the executable name in the tools directory, or an
// error that says how to get it.
func Binary(ctx context.Context, name string) (string, error) {
	dir, err := Dir(ctx)
	if err != nil {
		return "", err
	}
	if err := Check(dir, name); err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

// Check reports the executables of need missing from dir.
func Check(dir string, need ...string) error {
	var missing []string
	for _, b := range need {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("tools directory %s lacks %s: run scripts/install-tools and set %s to the directory it prints", dir, strings.Join(missing, ", "), EnvDir)
	}
	return nil
}

// RepoRoot walks up from the working directory to the checkout's root, the
// directory holding scripts/install-tools (go test runs in the package's
// directory).
func RepoRoot() (string, error) {
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

// lastLines is the end of a command's output, for an error message.
func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

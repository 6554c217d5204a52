package scale

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"

	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/testenv"
)

// controllerProc is the running `slipway ops controller` (slipway runs only).
var controllerProc struct {
	sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startController runs `slipway ops controller` as the manifest's
// controller ServiceAccount, with its default client limits; its log goes
// to dir/controller.log.
func startController(cfg *rest.Config, dir string) error {
	path := filepath.Join(dir, "kubeconfig-controller")
	if err := testenv.WriteKubeconfigAs(cfg, controllerIdentity, path); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "controller.log"))
	if err != nil {
		return err
	}
	args := []string{"ops", "controller", "--identity", "controller-scale",
		"--namespace", ns, "--kubeconfig", path, "--metrics-addr", "", "--lease-duration", lease, "--resync", resync, "--retry-backoff", "1h"}
	if profileDir != "" {
		if controllerProfileAddr, err = freeAddr(); err != nil {
			return err
		}
		args = append(args, "--pprof-addr", controllerProfileAddr)
	}
	cmd := exec.CommandContext(context.Background(), filepath.Join(binDir, "slipway"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start slipway ops controller: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	controllerProc.Lock()
	controllerProc.cmd, controllerProc.done = cmd, done
	controllerProc.Unlock()
	return nil
}

// controllerPid is the controller's process id (0 when none runs).
func controllerPid() int {
	controllerProc.Lock()
	defer controllerProc.Unlock()
	if controllerProc.cmd == nil || controllerProc.cmd.Process == nil {
		return 0
	}
	return controllerProc.cmd.Process.Pid
}

// stopController ends the controller and waits for it.
func stopController() {
	controllerProc.Lock()
	cmd, done := controllerProc.cmd, controllerProc.done
	controllerProc.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	<-done
}

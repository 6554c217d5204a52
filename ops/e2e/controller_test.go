package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/testenv"
)

// The controller, `slipway ops controller`, runs beside the agents for the
// whole run, as the manifest's controller ServiceAccount: one process of
// the built binary, started once the access objects exist and stopped
// after the tests.

var controllerIdentity = &testenv.Identity{
	User:   manifest.ControllerUser(ns),
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
}

// controllerProc is the running controller (nil before Setup).
var controllerProc struct {
	sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startController writes a kubeconfig that acts as the controller's
// ServiceAccount and starts `slipway ops controller` with it; its log goes
// to dir/controller.log.
func startController(cfg *rest.Config, bin, dir string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["controller"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, Impersonate: controllerIdentity.User, ImpersonateGroups: controllerIdentity.Groups}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "controller"}
	kc.CurrentContext = "e2e"
	path := filepath.Join(dir, "kubeconfig-controller")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write the controller's kubeconfig: %w", err)
	}
	// Appended: a replaced controller's log follows its predecessor's.
	logf, err := os.OpenFile(filepath.Join(dir, "controller.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(context.Background(), filepath.Join(bin, "slipway"), "ops", "controller", "--identity", "controller-e2e",
		"--namespace", ns, "--kubeconfig", path, "--metrics-addr", "", "--lease-duration", lease, "--resync", "10s", "--retry-backoff", "1h")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives a test binary that dies
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

// stopController ends the controller (SIGTERM: it gives its Lease back) and waits for it.
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

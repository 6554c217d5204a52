package scale

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
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
	kc := clientcmdapi.NewConfig()
	kc.Clusters["scale"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["controller"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, Impersonate: controllerIdentity.User, ImpersonateGroups: controllerIdentity.Groups}
	kc.Contexts["scale"] = &clientcmdapi.Context{Cluster: "scale", AuthInfo: "controller"}
	kc.CurrentContext = "scale"
	path := filepath.Join(dir, "kubeconfig-controller")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write the controller's kubeconfig: %w", err)
	}
	logf, err := os.Create(filepath.Join(dir, "controller.log"))
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(context.Background(), filepath.Join(binDir, "slipway"), "ops", "controller", "--identity", "controller-scale",
		"--namespace", ns, "--kubeconfig", path, "--metrics-addr", "", "--lease-duration", lease, "--resync", resync, "--retry-backoff", "1h")
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

// create creates one of the manifest's access objects.
func create(ctx context.Context, c kubernetes.Interface, obj any) error {
	o := metav1.CreateOptions{}
	var err error
	switch v := obj.(type) {
	case *corev1.Namespace:
		_, err = c.CoreV1().Namespaces().Create(ctx, v, o)
	case *corev1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(v.Namespace).Create(ctx, v, o)
	case *rbacv1.ClusterRole:
		_, err = c.RbacV1().ClusterRoles().Create(ctx, v, o)
	case *rbacv1.ClusterRoleBinding:
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, v, o)
	case *rbacv1.Role:
		_, err = c.RbacV1().Roles(v.Namespace).Create(ctx, v, o)
	case *rbacv1.RoleBinding:
		_, err = c.RbacV1().RoleBindings(v.Namespace).Create(ctx, v, o)
	case *admissionv1.ValidatingAdmissionPolicy:
		_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, v, o)
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, v, o)
	default:
		err = fmt.Errorf("no client for %T", obj)
	}
	return err
}

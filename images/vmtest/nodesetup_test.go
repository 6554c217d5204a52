//go:build vmnode

package vmtest

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"slipway.dev/slipway/images/build"
	"slipway.dev/slipway/ops/testenv"
)

// vmNodeName is the Node the test VM's kubelet registers.
const vmNodeName = "slipway-vm"

// hostFromGuest is the host's loopback as qemu's user networking shows it
// to the guest.
const hostFromGuest = "10.0.2.2"

// buildStatic builds a Go command of this module as a static binary.
func buildStatic(root, pkg, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, b)
	}
	return nil
}

// kubeletBinary builds (once, cached) and returns the kubelet.
func kubeletBinary(root string) (string, error) {
	cmd := exec.Command(filepath.Join(root, "scripts", "install-tools"), "--kubelet")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/install-tools --kubelet: %w", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		return "", fmt.Errorf("scripts/install-tools printed no folder")
	}
	return filepath.Join(lines[len(lines)-1], "kubelet"), nil
}

// slipwayArchive writes slipway's container image the way `make image-oci`
// does (scripts/image-oci: both architectures, the multi-call links, the CA
// roots), named build.SlipwayImage: the image the node runs is the one the
// charts and manifests deploy.
func slipwayArchive(root, dir string) (string, error) {
	out := filepath.Join(dir, "slipway-oci.tar")
	cmd := exec.Command(filepath.Join(root, "scripts", "image-oci"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "IMAGE="+build.SlipwayImage, "OUT="+out, "WORK="+filepath.Join(dir, "oci"), "VERSION=vmtest")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("scripts/image-oci: %w: %s", err, b)
	}
	return out, nil
}

// nodeImages builds the releases (their initrds carry the node overlay) and
// the node disk.
func nodeImages(root, dir, bin, kubelet string, fl flavour) (*build.Result, string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return nil, "", err
	}
	cache = filepath.Join(cache, "slipway", "images")
	pause, fwd := filepath.Join(dir, "pause"), filepath.Join(dir, "loopfwd")
	if err := buildStatic(root, "./images/cmd/pause", pause); err != nil {
		return nil, "", err
	}
	if err := buildStatic(root, "./images/cmd/loopfwd", fwd); err != nil {
		return nil, "", err
	}
	archive, err := slipwayArchive(root, dir)
	if err != nil {
		return nil, "", err
	}
	extra := filepath.Join(root, "images", "node", "overlay")
	if fl != plainNode {
		extra += string(filepath.ListSeparator) + filepath.Join(root, "images", "node", string(fl))
	}
	// v2 is an upgrade of the kernel too: v1 carries the kernel before
	// the one Debian's metapackage names, so `uname -r` (the Node's
	// nodeInfo.kernelVersion, from the kubelet) tells the two apart.
	older, err := build.PreviousKernelPackage(context.Background())
	if err != nil {
		return nil, "", err
	}
	img, err := build.Run(context.Background(), build.Options{
		Out: filepath.Join(dir, "images"), Cache: cache, Slipway: bin,
		Overlay: filepath.Join(root, "overlay"), Extra: extra,
		Versions: []build.Version{{Name: "v1", KernelPackage: older}, {Name: "v2"}}, DiskMiB: 2048,
	})
	if err != nil {
		return nil, "", err
	}
	disk := filepath.Join(dir, "node.img")
	err = build.BuildNode(context.Background(), build.NodeOptions{Out: disk, Cache: cache, Kubelet: kubelet,
		SlipwayArchive: archive, Pause: pause, Forwarder: fwd, Config: filepath.Join(root, "images", "node", "etc"),
		KernelPackages: []string{older, ""}})
	return img, disk, err
}

// kubeletKubeconfig gives the VM's kubelet a service account bound to the
// system:node role (the Node authorizer needs client certificates or a
// token file entry, which a running control plane cannot add) and writes a
// kubeconfig that reaches the apiserver at the host's loopback through
// qemu's user networking, checking the apiserver's certificate by the name
// it was issued for.
func kubeletKubeconfig(ctx context.Context, env *testenv.Env, path string) error {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "vm-kubelet", Namespace: "kube-system"}}
	if _, err := cs.CoreV1().ServiceAccounts("kube-system").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the kubelet's service account: %w", err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "vm-kubelet"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:node"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "vm-kubelet", Namespace: "kube-system"}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("bind the kubelet's service account: %w", err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "vm-kubelet",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64((6 * time.Hour).Seconds()))}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("issue the kubelet's token: %w", err)
	}
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		return err
	}
	name, err := certName(env.Config.CAData)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["vm"] = &clientcmdapi.Cluster{Server: "https://" + hostFromGuest + ":" + u.Port(),
		CertificateAuthorityData: env.Config.CAData, TLSServerName: name}
	cfg.AuthInfos["vm"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["vm"] = &clientcmdapi.Context{Cluster: "vm", AuthInfo: "vm"}
	cfg.CurrentContext = "vm"
	return clientcmd.WriteToFile(*cfg, path)
}

// certName is a DNS name the apiserver's self-signed certificate holds.
func certName(pemData []byte) (string, error) {
	b, _ := pem.Decode(pemData)
	if b == nil {
		return "", fmt.Errorf("the apiserver's CA data is not PEM")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "", fmt.Errorf("parse the apiserver's certificate: %w", err)
	}
	for _, n := range c.DNSNames {
		if n == "localhost" {
			return n, nil
		}
	}
	if len(c.DNSNames) == 0 {
		return "", fmt.Errorf("the apiserver's certificate has no DNS name (IPs %v)", c.IPAddresses)
	}
	return c.DNSNames[0], nil
}

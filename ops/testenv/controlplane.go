package testenv

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// freePorts reserves n distinct free loopback ports and releases them for the
// caller's processes to bind.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// writeCredentials writes the service-account signing key and the admin token
// file, and returns the token.
func writeCredentials(dir string) (token string, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", fmt.Errorf("generate the service-account key: %w", err)
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), keyPEM, 0o600); err != nil {
		return "", fmt.Errorf("write the service-account key: %w", err)
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	token = hex.EncodeToString(b)
	line := token + ",admin,admin,system:masters\n"
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(line), 0o600); err != nil {
		return "", fmt.Errorf("write the token file: %w", err)
	}
	return token, nil
}

// startControlPlane starts etcd and kube-apiserver and waits for /readyz.
// A port taken between choosing and binding is retried with new ports.
func (e *Env) startControlPlane(ctx context.Context, tools string) error {
	token, err := writeCredentials(e.Dir)
	if err != nil {
		return err
	}
	var lastErr error
	for attempt := range 3 {
		ports, err := freePorts(3)
		if err != nil {
			return err
		}
		lastErr = e.tryControlPlane(ctx, tools, token, ports, attempt)
		if lastErr == nil || ctx.Err() != nil {
			return lastErr
		}
		for _, p := range e.procs {
			p.stop(5 * time.Second)
		}
		e.procs = nil
	}
	return lastErr
}

func (e *Env) tryControlPlane(ctx context.Context, tools, token string, ports []int, attempt int) error {
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	dataDir := filepath.Join(e.Dir, fmt.Sprintf("etcd-data-%d", attempt))
	etcd, err := e.addProcess("etcd", filepath.Join(tools, binEtcd),
		"--name=default", "--data-dir="+dataDir,
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync=true", "--log-level=warn", "--quota-backend-bytes=4294967296")
	if err != nil {
		return err
	}
	certDir := filepath.Join(e.Dir, "apiserver-certs")
	apiPort := strconv.Itoa(ports[2])
	audit, err := e.auditFlags()
	if err != nil {
		return err
	}
	api, err := e.addProcess("kube-apiserver", filepath.Join(tools, binAPIServer), append(audit,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+apiPort,
		"--cert-dir="+certDir,
		"--token-auth-file="+filepath.Join(e.Dir, "tokens.csv"),
		// As a real cluster's (k3s, kubeadm): a kubelet's credentials may
		// write only its own Node and the pods bound to it.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+filepath.Join(e.Dir, "sa.key"),
		"--service-account-signing-key-file="+filepath.Join(e.Dir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		"--enable-priority-and-fairness=false",
		"--profiling="+strconv.FormatBool(e.opts.APIServerProfiling),
		"--v=1")...)
	if err != nil {
		return err
	}
	host := "https://127.0.0.1:" + apiPort
	if err := waitReady(ctx, host, token, []*process{etcd, api}); err != nil {
		return err
	}
	caFile := filepath.Join(certDir, "apiserver.crt")
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("read the apiserver's self-signed certificate: %w", err)
	}
	e.Config = &rest.Config{Host: host, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca}, QPS: 200, Burst: 400}
	e.Kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	return writeKubeconfig(e.Kubeconfig, host, token, ca)
}

// waitReady polls the apiserver's /readyz until it answers ok.
func waitReady(ctx context.Context, host, token string, procs []*process) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // its certificate is being made; read after
	}}
	defer client.CloseIdleConnections()
	return waitFor(ctx, "wait for kube-apiserver /readyz", 200*time.Millisecond, procs, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+"/readyz", nil)
		if err != nil {
			return false, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("/readyz answered %s", resp.Status)
		}
		return true, nil
	})
}

// writeKubeconfig writes a self-contained kubeconfig for the admin token.
func writeKubeconfig(path, host, token string, ca []byte) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["slipway"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["slipway"] = &clientcmdapi.Context{Cluster: "slipway", AuthInfo: "admin"}
	cfg.CurrentContext = "slipway"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

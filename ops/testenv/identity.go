package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// NodeNameExtra is the user-info extra in which the API server names the
// node a bound service-account token belongs to (the pod's node, or the
// Node the token is bound to). Admission policies compare it with the
// object a node agent writes.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// NodeKubeconfig is the file name, under each node's directory, of the
// kubeconfig that acts as Options.NodeIdentity on that node.
const NodeKubeconfig = "kubeconfig-node"

// ServiceAccount is the identity the API server gives a token of
// ServiceAccount namespace/name: its user name and groups.
func ServiceAccount(namespace, name string) *Identity {
	return &Identity{
		User:   "system:serviceaccount:" + namespace + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
}

// ParseServiceAccount reads "NAMESPACE/NAME" as ServiceAccount's identity.
func ParseServiceAccount(s string) (*Identity, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("service account %q: want NAMESPACE/NAME, e.g. slipway-system/slipway-agent", s)
	}
	return ServiceAccount(ns, name), nil
}

// KubeconfigAs is the admin kubeconfig at path made to impersonate id; with
// node set, as a token bound to that node (NodeNameExtra) does.
func KubeconfigAs(path string, id *Identity, node string) (*clientcmdapi.Config, error) {
	base, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the admin kubeconfig: %w", err)
	}
	cfg := base.DeepCopy()
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok || cfg.AuthInfos[ctx.AuthInfo] == nil {
		return nil, fmt.Errorf("the admin kubeconfig %s has no current context with a user", path)
	}
	auth := cfg.AuthInfos[ctx.AuthInfo]
	auth.Impersonate, auth.ImpersonateGroups = id.User, id.Groups
	auth.ImpersonateUserExtra = nil
	if node != "" {
		auth.ImpersonateUserExtra = map[string][]string{NodeNameExtra: {node}}
	}
	return cfg, nil
}

// writeNodeKubeconfigs writes, when Options.NodeIdentity is set, one
// kubeconfig per fake node that impersonates the identity with the node's
// name in NodeNameExtra.
func (e *Env) writeNodeKubeconfigs() error {
	id := e.opts.NodeIdentity
	if id == nil {
		return nil
	}
	for _, node := range e.Nodes {
		cfg, err := KubeconfigAs(e.Kubeconfig, id, node)
		if err != nil {
			return err
		}
		dir := filepath.Join(e.NodesRoot, node)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("node directory: %w", err)
		}
		if err := clientcmd.WriteToFile(*cfg, filepath.Join(dir, NodeKubeconfig)); err != nil {
			return fmt.Errorf("write %s's kubeconfig: %w", node, err)
		}
	}
	return nil
}

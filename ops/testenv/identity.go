package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
)

// NodeNameExtra is the user-info extra in which the API server names the
// node a bound service-account token belongs to (the pod's node, or the
// Node the token is bound to). Admission policies compare it with the
// object a node agent writes.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// NodeKubeconfig is the file name, under each node's directory, of the
// kubeconfig that acts as Options.NodeIdentity on that node.
const NodeKubeconfig = "kubeconfig-node"

// writeNodeKubeconfigs writes, when Options.NodeIdentity is set, one
// kubeconfig per fake node that impersonates the identity with the node's
// name in NodeNameExtra.
func (e *Env) writeNodeKubeconfigs() error {
	id := e.opts.NodeIdentity
	if id == nil {
		return nil
	}
	base, err := clientcmd.LoadFromFile(e.Kubeconfig)
	if err != nil {
		return fmt.Errorf("read the admin kubeconfig: %w", err)
	}
	for _, node := range e.Nodes {
		cfg := base.DeepCopy()
		auth := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
		auth.Impersonate, auth.ImpersonateGroups = id.User, id.Groups
		auth.ImpersonateUserExtra = map[string][]string{NodeNameExtra: {node}}
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

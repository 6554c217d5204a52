package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"k8s.io/client-go/tools/clientcmd"

	"slipway.dev/slipway/ops/testenv"
)

// kubeconfig prints the admin kubeconfig made to act as a ServiceAccount,
// optionally bound to a node: the identity a component has in its pod.
func kubeconfig(out io.Writer, args []string) error {
	fs := flag.NewFlagSet("kubeconfig", flag.ContinueOnError)
	as := fs.String("as", "", "NAMESPACE/SERVICEACCOUNT to act as (required)")
	node := fs.String("node", "", "the node the identity is bound to (a DaemonSet pod's token names its node)")
	admin := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "the simulated cluster's admin kubeconfig (default $KUBECONFIG)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *as == "" || *admin == "" {
		return fmt.Errorf("kubeconfig: --as NAMESPACE/SERVICEACCOUNT and --kubeconfig (or $KUBECONFIG) are required: %w", flag.ErrHelp)
	}
	id, err := testenv.ParseServiceAccount(*as)
	if err != nil {
		return fmt.Errorf("kubeconfig: --as: %w", err)
	}
	cfg, err := testenv.KubeconfigAs(*admin, id, *node)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	_, err = out.Write(b)
	return err
}

package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"slipway.dev/slipway/ops/testenv"
)

// status prints how many fake nodes are Ready and which are not.
func status(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the simulated cluster")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.NodeRoleLabel})
	if err != nil {
		return fmt.Errorf("list nodes (is the cluster up?): %w", err)
	}
	ready := 0
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if testenv.NodeReady(n) {
			ready++
		} else {
			fmt.Printf("node %s not Ready\n", n.Name)
		}
	}
	fmt.Printf("%d/%d fake nodes Ready\n", ready, len(nodes.Items))
	return nil
}

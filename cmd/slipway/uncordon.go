package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/protocol"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// cordonOwners are the owners slipway's systems cordon nodes as (the
// drain.slipway.dev/cordoned-by annotation): the UpdateChannel controller
// and the update operator.
var cordonOwners = []string{protocol.CordonOwner, uo.CordonOwner}

// ownedBy tells whether a cordon recorded as by is one of owners': the owner
// itself, or the update operator's owner with its prefix
// (slipway-update-operator.<prefix>, see updateoperator.Keys.CordonOwner).
func ownedBy(by string, owners []string) bool {
	return by != "" && slices.ContainsFunc(owners, func(o string) bool { return by == o || strings.HasPrefix(by, o+".") })
}

// uncordonAllCommand lifts the cordons slipway left behind, for when the
// controller that would lift them is gone (helm uninstall, or the manifest
// deleted, in the middle of a rollout). It undoes each cordon as the
// controller would: a node cordoned by hand before slipway's cordon stays
// cordoned, a node cordoned by anyone else is not touched.
func uncordonAllCommand() *cli.Command {
	return &cli.Command{
		Name:  "uncordon-all",
		Usage: "lift every cordon slipway left on the nodes (after uninstalling it mid-rollout)",
		Description: "Lists the nodes whose drain.slipway.dev/cordoned-by annotation names one of --owner and\n" +
			"uncordons each as slipway's controller would: the annotations are removed, and the node becomes\n" +
			"schedulable unless it was cordoned before slipway cordoned it. Nodes cordoned by others are left alone.\n" +
			"Run it after the controller is gone: a running controller may cordon again.",
		Flags: []cli.Flag{
			kubeconfigFlag(),
			&cli.StringSliceFlag{Name: "owner", Value: cli.NewStringSlice(cordonOwners...), Usage: "cordon owners to lift (" + protocol.CordonOwner + ": the UpdateChannel controller, " + uo.CordonOwner + ": the update operator)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the nodes and change nothing"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := kubeConfig(c.String("kubeconfig"))
			if err != nil {
				return err
			}
			k, err := kube.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("client: %w", err)
			}
			owners := c.StringSlice("owner")
			nodes, err := k.CoreV1().Nodes().List(c.Context, metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("list the nodes: %w", err)
			}
			var todo []string
			owner := map[string]string{}
			for _, n := range nodes.Items {
				if by := drain.CordonedBy(n.Annotations); ownedBy(by, owners) {
					todo = append(todo, n.Name)
					owner[n.Name] = by
				}
			}
			sort.Strings(todo)
			for _, n := range todo {
				if c.Bool("dry-run") {
					fmt.Fprintf(c.App.Writer, "would uncordon %s (cordoned by %s)\n", n, owner[n])
					continue
				}
				// The controller's drain records go with its cordon.
				also := drain.Meta{Annotations: map[string]any{protocol.AnnotationDrainStarted: nil, protocol.AnnotationCordonedFor: nil}}
				changed, err := drain.Uncordon(c.Context, k, n, owner[n], also)
				if err != nil {
					return fmt.Errorf("uncordon %s: %w", n, err)
				}
				if changed {
					fmt.Fprintf(c.App.Writer, "uncordoned %s (cordoned by %s)\n", n, owner[n])
				}
			}
			if len(todo) == 0 {
				fmt.Fprintln(c.App.Writer, "no node carries a slipway cordon")
			}
			return nil
		},
	}
}

package controller

import (
	"context"
	"encoding/json"
	"fmt"

	"golang.org/x/sync/errgroup"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/config"
	"slipway.dev/slipway/ops/swarm/member"
	"slipway.dev/slipway/ops/swarm/plan"
)

// shareWriters is how many share patches are in flight at once. The
// patches of one config are independent of each other (the handover orders
// versions, not pods), and written one at a time they are bound by each
// request's round trip rather than by the client's rate: 950 patches took
// over two minutes on a loaded API server (BenchmarkLargeSwarm).
const shareWriters = 16

// writeShares puts on each worker pod its share of cfg (annotation
// config.ShareAnnotation, read by the worker through a downwardAPI volume),
// where the pod's annotation does not already give it: a share per worker,
// so no write grows with the pool, and each worker reads its own only. A pod
// that holds a share annotation but no share any more gets an empty one, so
// its worker drops its jobs. A share stamped with a config version older
// than its worker's Lease allows (member.MinVersion: a fence written since)
// is stamped again, or the worker would wait for a newer one forever. Each
// patch names the pod's UID: a pod replaced meanwhile is left to the next
// sync. Up to shareWriters patches are in flight; the first error ends the
// others.
func (c *Controller) writeShares(ctx context.Context, sw *swarmv1.Swarm, cfg config.Config, pods []plan.Pod) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(shareWriters)
	for _, p := range pods {
		patch, size, err := c.sharePatch(sw, cfg, p.Name)
		if err != nil {
			_ = g.Wait()
			return err
		}
		if patch == nil {
			continue
		}
		g.Go(func() error {
			_, err := c.kube.CoreV1().Pods(sw.Namespace).Patch(gctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			if err != nil {
				return fmt.Errorf("write worker %s's share (%d bytes) on its pod: %w", p.Name, size, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// sharePatch is the patch that puts pod's share of cfg on it, and the
// share's size; nil when the pod's annotation already gives it (or the pod
// is gone).
func (c *Controller) sharePatch(sw *swarmv1.Swarm, cfg config.Config, name string) ([]byte, int, error) {
	obj, ok, _ := c.pods.GetByKey(sw.Namespace + "/" + name)
	if !ok {
		return nil, 0, nil
	}
	pod := obj.(*corev1.Pod)
	// trust: swarm.pod.share
	text, has := pod.Annotations[config.ShareAnnotation]
	_, holds := cfg.Workloads[name]
	if !has && !holds {
		return nil, 0, nil
	}
	if cur, err := config.Parse(text); has && err == nil && config.SameShare(cur, cfg, name) && cur.Version >= c.minVersion(sw.Namespace, name) {
		return nil, 0, nil
	}
	share, err := cfg.ShareOf(name).Render()
	if err != nil {
		return nil, 0, err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID,
		"annotations": map[string]string{config.ShareAnnotation: share}}})
	return patch, len(share), err
}

// minVersion is the oldest config version worker w may run, as its Lease
// says (0: no Lease, no fence).
func (c *Controller) minVersion(ns, w string) int64 {
	obj, ok, _ := c.leases.GetByKey(ns + "/" + member.LeaseName(w))
	if !ok {
		return 0
	}
	return member.MinVersion(obj.(*coordinationv1.Lease))
}

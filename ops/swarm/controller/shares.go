package controller

import (
	"context"
	"encoding/json"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/config"
	"slipway.dev/slipway/ops/swarm/member"
	"slipway.dev/slipway/ops/swarm/plan"
)

// writeShares puts on each worker pod its share of cfg (annotation
// config.ShareAnnotation, read by the worker through a downwardAPI volume),
// where the pod's annotation does not already give it: a share per worker,
// so no write grows with the pool, and each worker reads its own only. A pod
// that holds a share annotation but no share any more gets an empty one, so
// its worker drops its jobs. A share stamped with a config version older
// than its worker's Lease allows (member.MinVersion: a fence written since)
// is stamped again, or the worker would wait for a newer one forever. Each patch names the pod's UID: a pod replaced
// meanwhile is left to the next sync.
func (c *Controller) writeShares(ctx context.Context, sw *swarmv1.Swarm, cfg config.Config, pods []plan.Pod) error {
	for _, p := range pods {
		obj, ok, _ := c.pods.GetByKey(sw.Namespace + "/" + p.Name)
		if !ok {
			continue
		}
		pod := obj.(*corev1.Pod)
		text, has := pod.Annotations[config.ShareAnnotation]
		_, holds := cfg.Workloads[p.Name]
		if !has && !holds {
			continue
		}
		if cur, err := config.Parse(text); has && err == nil && config.SameShare(cur, cfg, p.Name) && cur.Version >= c.minVersion(sw.Namespace, p.Name) {
			continue
		}
		share, err := cfg.ShareOf(p.Name).Render()
		if err != nil {
			return err
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID,
			"annotations": map[string]string{config.ShareAnnotation: share}}})
		if err != nil {
			return err
		}
		_, err = c.kube.CoreV1().Pods(sw.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return fmt.Errorf("write worker %s's share (%d bytes) on its pod: %w", p.Name, len(share), err)
		}
	}
	return nil
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

package updateoperator

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"slipway.dev/slipway/ops/kube"
)

// drainedWorkloads lists the workloads (Deployment, StatefulSet, or a
// ReplicaSet no Deployment owns) whose pods run on node, as
// kind/namespace/name: the ones a drain takes pods from, split by Gating
// into those healthy now and those failing already.
func drainedWorkloads(ctx context.Context, c *kube.Clientset, node string) (gate, skipped []string, err error) {
	pods, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, nil, fmt.Errorf("list the pods of %s: %w", node, err)
	}
	set := map[string]bool{}
	for _, p := range pods.Items {
		// trust: uo.pod.owner
		ref := metav1.GetControllerOf(&p)
		if ref == nil {
			continue
		}
		switch ref.Kind {
		case "StatefulSet":
			set["StatefulSet/"+p.Namespace+"/"+ref.Name] = true
		case "ReplicaSet":
			w, err := replicaSetOwner(ctx, c, p.Namespace, ref.Name)
			if err != nil {
				return nil, nil, err
			}
			set[w] = true
		}
	}
	var hs []WorkloadHealth
	for w := range set {
		h := WorkloadHealth{Name: w}
		parts := strings.SplitN(w, "/", 3)
		var err error
		h.Want, h.Ready, err = readyCount(ctx, c, parts[0], parts[1], parts[2])
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("read %s: %w", w, err)
		}
		hs = append(hs, h)
	}
	gate, skipped = Gating(hs)
	return gate, skipped, nil
}

// WorkloadHealth is one workload's desired and ready replicas.
type WorkloadHealth struct {
	Name        string // kind/namespace/name
	Want, Ready int32
}

// Gating splits the workloads a drain takes pods from, as they were just
// before it: the healthy ones (every desired replica ready) gate the node's
// update, which finishes only once each is healthy again; the ones failing
// already are not waited for (the update did not break them, and waiting
// would hold the rollout for as long as they fail). Both sorted.
func Gating(ws []WorkloadHealth) (gate, skipped []string) {
	for _, w := range ws {
		if w.Ready >= w.Want {
			gate = append(gate, w.Name)
		} else {
			skipped = append(skipped, fmt.Sprintf("%s (%d of %d ready)", w.Name, w.Ready, w.Want))
		}
	}
	sort.Strings(gate)
	sort.Strings(skipped)
	return gate, skipped
}

func replicaSetOwner(ctx context.Context, c *kube.Clientset, ns, name string) (string, error) {
	rs, err := c.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "ReplicaSet/" + ns + "/" + name, nil
	}
	if err != nil {
		return "", fmt.Errorf("read replicaset %s/%s: %w", ns, name, err)
	}
	// trust: uo.pod.owner
	if ref := metav1.GetControllerOf(rs); ref != nil && ref.Kind == "Deployment" {
		return "Deployment/" + ns + "/" + ref.Name, nil
	}
	return "ReplicaSet/" + ns + "/" + name, nil
}

// workloadsReady reports whether every workload is back to its desired
// ready count, naming the first that is not. A workload deleted meanwhile
// counts as ready.
func workloadsReady(ctx context.Context, c *kube.Clientset, workloads []string) (bool, string, error) {
	for _, w := range workloads {
		parts := strings.SplitN(w, "/", 3)
		if len(parts) != 3 {
			continue
		}
		want, ready, err := readyCount(ctx, c, parts[0], parts[1], parts[2])
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, "", fmt.Errorf("read %s: %w", w, err)
		}
		if ready < want {
			return false, fmt.Sprintf("%s has %d of %d replicas ready", w, ready, want), nil
		}
	}
	return true, "", nil
}

func readyCount(ctx context.Context, c *kube.Clientset, kind, ns, name string) (want, ready int32, err error) {
	one := func(p *int32) int32 {
		if p == nil {
			return 1
		}
		return *p
	}
	switch kind {
	case "Deployment":
		d, err := c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, 0, err
		}
		// trust: uo.workload.ready
		return one(d.Spec.Replicas), d.Status.ReadyReplicas, nil
	case "StatefulSet":
		s, err := c.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, 0, err
		}
		// trust: uo.workload.ready
		return one(s.Spec.Replicas), s.Status.ReadyReplicas, nil
	case "ReplicaSet":
		r, err := c.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, 0, err
		}
		// trust: uo.workload.ready
		return one(r.Spec.Replicas), r.Status.ReadyReplicas, nil
	}
	return 0, 0, nil
}

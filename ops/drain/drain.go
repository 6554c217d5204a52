package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/kube"
)

// Options is a drain policy.
type Options struct {
	// Timeout bounds the whole drain (default 10m).
	Timeout time.Duration
	// GracePeriodSeconds overrides each pod's termination grace period; nil keeps the pod's own.
	GracePeriodSeconds *int64
	// DeleteEmptyDirData evicts pods with emptyDir volumes; without it they block the drain.
	DeleteEmptyDirData bool
	// IgnoreDaemonSets leaves DaemonSet pods in place; without it they block the drain.
	IgnoreDaemonSets bool
	// Force deletes pods whose eviction is still refused at the timeout, and
	// evicts pods that no controller owns (which otherwise block the drain).
	Force bool
	// EvictUnmanaged evicts pods that no controller owns through the
	// Eviction API like any other (PodDisruptionBudgets honoured), without
	// Force; without it (and without Force) they block the drain.
	EvictUnmanaged bool
	// Flags names the caller's own settings in the drain's errors (default
	// the drain.* fields of a spec).
	Flags Flags
	// PodSelector, a label selector, limits the drain to matching pods.
	PodSelector string
	// Keep are pods the drain leaves in place whatever the policy, as it
	// leaves mirror pods: the caller's own (a controller draining the node
	// it runs on, whose replacement could not schedule on the cordoned node
	// of a one-node cluster). The node's reboot ends them.
	Keep []PodSet
	// RetryInterval is how often refused evictions are retried and the node's
	// pods re-listed (default 2s).
	RetryInterval time.Duration
	// Log receives progress (default slog.Default()).
	Log *slog.Logger
}

// PodSet is the pods of one namespace whose labels match Labels (all of them).
type PodSet struct {
	Namespace string
	Labels    map[string]string
}

// Has tells whether p is one of s's pods.
func (s PodSet) Has(p corev1.Pod) bool {
	if p.Namespace != s.Namespace || len(s.Labels) == 0 {
		return false
	}
	for k, v := range s.Labels {
		if got, ok := p.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Flags are the names of the settings a caller exposes for Options, as its
// users write them, for the drain's errors: an error says what to set.
// An empty name is the drain.* field of a spec.
type Flags struct {
	IgnoreDaemonSets, DeleteEmptyDirData, Force, EvictUnmanaged string
}

func (f Flags) withDefaults() Flags {
	for _, d := range []struct {
		name *string
		def  string
	}{
		{&f.IgnoreDaemonSets, "drain.ignoreDaemonSets"}, {&f.DeleteEmptyDirData, "drain.deleteEmptyDirData"}, {&f.Force, "drain.force"}} {
		if *d.name == "" {
			*d.name = d.def
		}
	}
	return f
}

// Result says what a drain did.
type Result struct {
	Evicted []string // namespace/name of pods evicted
	Deleted []string // pods deleted after the timeout (Force)
}

// ErrBlocked is wrapped by the error Drain returns when pods are still on
// the node at the timeout, or when pods it may not touch are there.
var ErrBlocked = errors.New("drain blocked")

// Drain evicts the pods of node through the Eviction API, retrying the ones
// a PodDisruptionBudget refuses, until none is left or opts.Timeout passes.
// Mirror pods, finished pods and (with IgnoreDaemonSets) DaemonSet pods are
// left alone. At the timeout it deletes what is left if opts.Force, otherwise
// it returns an error naming the pods that blocked it. A cancelled ctx (the
// caller stopping) is not the timeout: it returns ctx's error and deletes
// nothing. The caller cordons first.
func Drain(parent context.Context, c *kube.Clientset, node string, opts Options) (*Result, error) {
	opts = withDefaults(opts)
	ctx, cancel := context.WithTimeout(parent, opts.Timeout)
	defer cancel()
	res := &Result{}
	blocked := map[string]string{} // pod -> why the last eviction was refused
	evicted := map[types.UID]bool{}
	for {
		pods, err := podsToDrain(ctx, c, node, opts)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return res, err
		}
		if len(pods) == 0 {
			return res, nil
		}
		for _, p := range pods {
			if evicted[p.UID] {
				continue // terminating; wait for it to go
			}
			key := p.Namespace + "/" + p.Name
			switch err := evict(ctx, c, p, opts.GracePeriodSeconds); {
			case err == nil || apierrors.IsNotFound(err):
				evicted[p.UID] = true
				delete(blocked, key)
				res.Evicted = append(res.Evicted, key)
				opts.Log.Info("evicted pod", "node", node, "pod", key)
			case apierrors.IsTooManyRequests(err) || apierrors.IsConflict(err):
				blocked[key] = err.Error()
			case ctx.Err() != nil:
			default:
				return res, fmt.Errorf("drain %s: evict %s: %w", node, key, err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(opts.RetryInterval): // refused evictions are retried, like kubectl drain does
			continue
		}
		break
	}
	if err := parent.Err(); err != nil {
		return res, fmt.Errorf("drain %s stopped before its timeout: %w", node, err)
	}
	return timedOut(context.WithoutCancel(ctx), c, node, opts, res, blocked)
}

// timedOut handles the pods still there when the drain's time is up.
func timedOut(ctx context.Context, c *kube.Clientset, node string, opts Options, res *Result, blocked map[string]string) (*Result, error) {
	pods, err := podsToDrain(ctx, c, node, opts)
	if err != nil {
		return res, err
	}
	if len(pods) == 0 {
		return res, nil
	}
	if !opts.Force {
		var why []string
		for _, p := range pods {
			key := p.Namespace + "/" + p.Name
			reason := "still terminating"
			if b, ok := blocked[key]; ok {
				reason = b
			}
			why = append(why, key+" ("+reason+")")
		}
		sort.Strings(why)
		return res, fmt.Errorf("%w: node %s still runs %d pods after %s: %s; fix their PodDisruptionBudgets or set %s to delete them",
			ErrBlocked, node, len(pods), opts.Timeout, strings.Join(why, ", "), opts.Flags.Force)
	}
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		err := c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: opts.GracePeriodSeconds})
		if err != nil && !apierrors.IsNotFound(err) {
			return res, fmt.Errorf("drain %s: force-delete %s: %w", node, key, err)
		}
		res.Deleted = append(res.Deleted, key)
		opts.Log.Warn("deleted pod after the drain timeout (drain.force)", "node", node, "pod", key)
	}
	return res, nil
}

func withDefaults(o Options) Options {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = 2 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	o.Flags = o.Flags.withDefaults()
	return o
}

func evict(ctx context.Context, c *kube.Clientset, p corev1.Pod, grace *int64) error {
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: grace, Preconditions: &metav1.Preconditions{UID: &p.UID}},
	}
	return c.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev)
}

// podsToDrain lists the node's pods that must go, or fails naming the pods
// the policy forbids touching.
func podsToDrain(ctx context.Context, c *kube.Clientset, node string, opts Options) ([]corev1.Pod, error) {
	list, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
		LabelSelector: opts.PodSelector,
	})
	if err != nil {
		return nil, fmt.Errorf("drain %s: list its pods: %w", node, err)
	}
	var out []corev1.Pod
	var refused []string
	for _, p := range list.Items {
		switch verdict(p, opts) {
		case skip:
		case refuse:
			refused = append(refused, p.Namespace+"/"+p.Name+" ("+refuseReason(p, opts)+")")
		default:
			out = append(out, p)
		}
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("%w: node %s runs pods the drain policy may not remove: %s",
			ErrBlocked, node, strings.Join(refused, ", "))
	}
	return out, nil
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/assign"
	"slipway.dev/slipway/ops/swarm/member"
	"slipway.dev/slipway/ops/swarm/plan"
)

// recheck is how soon a Swarm whose workers are restarting or whose
// workloads are unsettled is looked at again, events or not.
const recheck = 2 * time.Second

// sync brings one Swarm to its assignment. It returns how soon to look
// again (0: when something changes).
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	sw, err := c.current(ctx, ns, name)
	if apierrors.IsNotFound(err) {
		c.metrics.forget(name)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read Swarm %s: %w", key, err)
	}
	now := time.Now()
	g, bad := c.inputs(sw, now)
	if bad != nil {
		return 0, c.markInvalid(ctx, sw, bad)
	}
	in := g.in
	d, err := plan.Decide(in)
	var ae *assign.Error
	if errors.As(err, &ae) {
		return 0, c.markInvalid(ctx, sw, &invalid{reason: ae.Reason, message: ae.Message})
	}
	if err != nil {
		return 0, fmt.Errorf("decide Swarm %s: %w", key, err)
	}
	if d.Changed {
		if err := c.fenceWorkers(ctx, sw.Namespace, d.Fence, d.Config.Version); err != nil {
			return 0, err
		}
	}
	if err := c.write(ctx, sw, g, d); err != nil {
		var big *tooLarge
		if errors.As(err, &big) {
			return 0, c.markTooLarge(ctx, sw, big)
		}
		return 0, err
	}
	if d.Changed {
		c.announce(sw, in, d)
	}
	c.degraded(sw, d)
	// The status, which marks the workers to restart, is written first: its
	// resourceVersion guards against acting on a stale cache twice.
	if err := c.writeStatus(ctx, sw, g, d); err != nil {
		return 0, err
	}
	if err := c.restart(ctx, sw, d.Restart, in.Pods); err != nil {
		return 0, err
	}
	c.handedOver(sw, d.Awaiting, now)
	c.metrics.observe(sw.Name, in, d)
	if g.bad != nil {
		c.metrics.invalid.WithLabelValues(sw.Name).Set(1)
	}
	if !d.Converged || !in.Settled {
		return recheck, nil
	}
	// A worker cut off lets its Lease lapse without any event: look again
	// when the next one would.
	if next := c.lapsed(sw.Namespace, in.Pods, time.Now()); next > 0 {
		return next + 100*time.Millisecond, nil
	}
	return 0, nil
}

// write writes the record (the workers' ConfigMap) when it changed, then
// each worker's share on its pod. A write the API server refuses as too
// large is returned as a *tooLarge, and not tried again while the config
// stays the same.
func (c *Controller) write(ctx context.Context, sw *swarmv1.Swarm, g gathered, d plan.Decision) error {
	key := sw.Namespace + "/" + sw.Name
	text, err := d.Config.Render()
	if err != nil {
		return err
	}
	c.mu.Lock()
	refused, again := c.refused[key]
	c.mu.Unlock()
	if again && refused.text == text {
		return refused
	}
	err, record := nil, false
	if d.Changed || !g.spec.equal(g.rec.valid) {
		err = c.writeConfig(ctx, sw, g.cm, stored{cfg: d.Config, valid: g.spec})
		record = err != nil
	}
	if err == nil {
		err = c.writeShares(ctx, sw, d.Config, g.in.Pods)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.refused, key)
	if isTooLarge(err) {
		big := &tooLarge{text: text, err: err, record: record, jobs: len(g.spec.Jobs)}
		c.refused[key] = big
		return big
	}
	return err
}

// current is the Swarm from the cache, or from the API server while the
// cache does not show this replica's last status write yet: the status holds
// the restarts in flight and the hashes of the shares written, and a stale
// one would let a ConfigMap write or a restart go through twice.
func (c *Controller) current(ctx context.Context, ns, name string) (*swarmv1.Swarm, error) {
	key := ns + "/" + name
	sw, err := c.swarms.Swarms(ns).Get(name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	rv, pending := c.written[key]
	if pending && rv == sw.ResourceVersion {
		delete(c.written, key)
	}
	c.mu.Unlock()
	if !pending || rv == sw.ResourceVersion {
		return sw, nil
	}
	return c.swarm.Swarms(ns).Get(ctx, name, metav1.GetOptions{})
}

// writeConfig creates or updates the workers' ConfigMap, owned by the Swarm.
func (c *Controller) writeConfig(ctx context.Context, sw *swarmv1.Swarm, cm *corev1.ConfigMap, rec stored) error {
	api := c.kube.CoreV1().ConfigMaps(sw.Namespace)
	if cm == nil {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configMapName(sw), Namespace: sw.Namespace}}
		c.own(sw, cm)
		if err := rec.fill(cm); err != nil {
			return err
		}
		if _, err := api.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create the workers' ConfigMap %s: %w", cm.Name, err)
		}
		return nil
	}
	cm = cm.DeepCopy()
	c.own(sw, cm)
	if err := rec.fill(cm); err != nil {
		return err
	}
	if _, err := api.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update the workers' ConfigMap %s: %w", cm.Name, err)
	}
	return nil
}

// fenceWorkers writes on the Lease of each worker named (judged to run
// nothing) that it may run no config older than version, before that
// config gives its jobs away: a worker that comes back reads its Lease and
// waits for its mounted config to catch up (package member). Each write
// carries the resourceVersion judged, so a worker that renewed meanwhile
// makes it conflict, and the sync starts over.
func (c *Controller) fenceWorkers(ctx context.Context, ns string, names []string, version int64) error {
	api := c.kube.CoordinationV1().Leases(ns)
	for _, name := range names {
		obj, ok, _ := c.leases.GetByKey(ns + "/" + member.LeaseName(name))
		if !ok {
			l := member.WithMinVersion(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: member.LeaseName(name), Namespace: ns}}, version)
			l.Spec.HolderIdentity = new(string)
			if _, err := api.Create(ctx, l, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("fence worker %s before its jobs move: create its Lease: %w", name, err)
			}
			continue
		}
		l := obj.(*coordinationv1.Lease)
		if member.MinVersion(l) >= version {
			continue
		}
		if _, err := api.Update(ctx, member.WithMinVersion(l, version), metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("fence worker %s before its jobs move: %w", name, err)
		}
	}
	return nil
}

// own labels cm with the Swarm and makes the Swarm its owner, so deleting
// the Swarm deletes it.
func (c *Controller) own(sw *swarmv1.Swarm, cm *corev1.ConfigMap) {
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels[swarmv1.SwarmLabel] = sw.Name
	for _, o := range cm.OwnerReferences {
		if o.UID == sw.UID {
			return
		}
	}
	cm.OwnerReferences = append(cm.OwnerReferences, *metav1.NewControllerRef(sw, swarmv1.SchemeGroupVersion.WithKind("Swarm")))
}

// restart deletes the pods named, each only if it is still the pod the
// decision saw (its UID), so a pod already replaced is left alone.
func (c *Controller) restart(ctx context.Context, sw *swarmv1.Swarm, names []string, pods []plan.Pod) error {
	uid := map[string]string{}
	for _, p := range pods {
		uid[p.Name] = p.UID
	}
	for _, name := range names {
		u := types.UID(uid[name])
		err := c.kube.CoreV1().Pods(sw.Namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &u}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue // gone or replaced already: this delete did nothing
		}
		if err != nil {
			return fmt.Errorf("restart worker %s: %w", name, err)
		}
		c.metrics.refreshes.WithLabelValues(sw.Name).Inc()
		c.recorder.Eventf(sw, corev1.EventTypeNormal, "WorkerRestarted", "restarted worker %s: its jobs changed", name)
	}
	return nil
}

// degraded records, with a Warning Event, a change of the dedicated jobs
// left out for want of workers (the Balanced condition says it too).
func (c *Controller) degraded(sw *swarmv1.Swarm, d plan.Decision) {
	old := meta.FindStatusCondition(sw.Status.Conditions, swarmv1.ConditionBalanced)
	if len(d.LeftOut) == 0 || (old != nil && old.Reason == ReasonDegraded && old.Message == degradedMessage(d)) {
		return
	}
	c.recorder.Event(sw, corev1.EventTypeWarning, ReasonDegraded, degradedMessage(d))
	c.log.Warn("degraded assignment", "swarm", sw.Name, "leftOut", len(d.LeftOut))
}

// announce records a new version: an Event and a log line.
func (c *Controller) announce(sw *swarmv1.Swarm, in plan.Input, d plan.Decision) {
	changed := 0
	for _, w := range d.Config.Workloads {
		if w.Version == d.Config.Version {
			changed++
		}
	}
	if changed == 0 && d.Moved == 0 {
		c.log.Debug("jobs released", "swarm", sw.Name, "version", d.Config.Version, "awaiting", d.Awaiting)
		return
	}
	msg := fmt.Sprintf("version %d: %d jobs over %d workers, %d moved, %d workers' shares changed",
		d.Config.Version, len(in.Jobs), len(d.Config.Workloads), d.Moved, changed)
	if d.Awaiting > 0 {
		msg += fmt.Sprintf(", %d jobs wait for their old worker to stop them", d.Awaiting)
	}
	if d.Unassigned > d.Awaiting {
		msg += fmt.Sprintf(", %d jobs unassigned", d.Unassigned)
	}
	c.recorder.Event(sw, corev1.EventTypeNormal, "NewVersion", msg)
	c.log.Info("new assignment", "swarm", sw.Name, "version", d.Config.Version, "moved", d.Moved, "changed", changed, "unassigned", d.Unassigned)
	c.metrics.moves.WithLabelValues(sw.Name).Add(float64(d.Moved))
}

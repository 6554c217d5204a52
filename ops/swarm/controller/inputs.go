package controller

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/assign"
	"slipway.dev/slipway/ops/swarm/config"
	"slipway.dev/slipway/ops/swarm/member"
	"slipway.dev/slipway/ops/swarm/plan"
)

// Reasons of the Invalid condition found before any assignment (package
// assign's reasons cover the job list itself).
const (
	ReasonBadSelector    = "BadSelector"
	ReasonNoWorkload     = "NoWorkload"
	ReasonBadJobs        = "BadJobList"
	ReasonJobsNotFound   = "JobListNotFound"
	ReasonBadConfigMap   = "BadConfigMap"
	ReasonConfigNotOwned = "ConfigMapNotOwned"
)

// invalid is a spec the controller cannot act on.
type invalid struct{ reason, message string }

func (e *invalid) Error() string { return e.message }

func invalidf(reason, format string, args ...any) *invalid {
	return &invalid{reason: reason, message: fmt.Sprintf(format, args...)}
}

// workload is a selected StatefulSet or Deployment.
type workload struct {
	selector labels.Selector
	replicas int32
	stable   bool // a StatefulSet: pods come back under their names
	name     string
	uid      types.UID
}

// owns tells whether pod is one of w's, by controller UIDs: a
// StatefulSet's controls it; a Deployment's pods are controlled by one of
// its ReplicaSets, which it controls (rsOwner: a ReplicaSet's controller
// UID, by the ReplicaSet's name and UID). Names are not compared: a
// Deployment "web" does not own the pods of "web-eu"'s ReplicaSets.
func (w workload) owns(pod *corev1.Pod, rsOwner func(name string, uid types.UID) (types.UID, bool)) bool {
	// trust: swarm.pod.owner-uid
	ref := metav1.GetControllerOf(pod)
	switch {
	case ref == nil:
		return false
	case w.stable:
		return ref.UID == w.uid
	case ref.Kind != "ReplicaSet":
		return false
	}
	owner, ok := rsOwner(ref.Name, ref.UID)
	return ok && owner == w.uid
}

// replicaSetOwner is the UID of the controller of the ReplicaSet name of
// the namespace, if that ReplicaSet (of that UID) is known and controlled.
func (c *Controller) replicaSetOwner(ns string) func(string, types.UID) (types.UID, bool) {
	return func(name string, uid types.UID) (types.UID, bool) {
		obj, ok, _ := c.replicaSets.GetByKey(ns + "/" + name)
		if !ok {
			return "", false
		}
		rs := obj.(*appsv1.ReplicaSet)
		// trust: swarm.replicaset.owner-uid
		ref := metav1.GetControllerOf(rs)
		if rs.UID != uid || ref == nil {
			return "", false
		}
		return ref.UID, true
	}
}

// gathered is a Swarm's decision input and what it was read from.
type gathered struct {
	in  plan.Input
	cm  *corev1.ConfigMap
	rec stored
	// spec is the spec acted on: the Swarm's own, or while that is
	// invalid (bad says why) the last valid one.
	spec *validSpec
	bad  *invalid
}

// inputs gathers a Swarm's decision input from the caches. An invalid spec
// is acted on as the last valid one recorded (g.bad says why), so a handover
// in flight completes; only with none recorded, or a ConfigMap the Swarm
// cannot own, is the invalid returned, and nothing moves.
func (c *Controller) inputs(sw *swarmv1.Swarm, now time.Time) (gathered, *invalid) {
	g := gathered{in: plan.Input{Status: sw.Status, Refresh: sw.Spec.Refresh, MaxUnavailable: int(sw.Spec.MaxUnavailable),
		RestartTimeout: c.opts.RestartTimeout, Now: now}}
	in := &g.in
	if in.Refresh == "" {
		in.Refresh = swarmv1.RefreshRestart
	}
	if in.MaxUnavailable < 1 {
		in.MaxUnavailable = swarmv1.DefaultMaxUnavailable
	}
	cm, bad := c.workersConfigMap(sw)
	if bad != nil {
		return g, bad
	}
	g.cm, g.rec = cm, readRecord(cm)
	if g.rec.parseErr != nil {
		c.recorder.Eventf(sw, corev1.EventTypeWarning, "ConfigRebuilt", "%v: rebuilding it from the job list", g.rec.parseErr)
	}
	spec, wls, bad := c.specOf(sw)
	if bad != nil {
		if g.rec.valid == nil {
			return g, bad
		}
		g.bad, spec = bad, g.rec.valid
		if wls, bad = c.workloads(sw.Namespace, spec.Workers); bad != nil {
			return g, g.bad
		}
	}
	g.spec, in.Jobs, in.Dedicated = spec, spec.Jobs, spec.Dedicated
	in.Pods, in.Settled, in.StableNames = c.workerPods(wls)
	in.Settled = c.settled(sw, in.Settled, now)
	in.Previous = g.rec.cfg
	in.Pods = append(in.Pods, c.foreignPods(sw.Namespace, in.Pods, in.Previous)...)
	c.lapsed(sw.Namespace, in.Pods, now)
	return g, nil
}

// specOf checks the Swarm's own spec: its job list, dedicated jobs and
// workloads.
func (c *Controller) specOf(sw *swarmv1.Swarm) (*validSpec, []workload, *invalid) {
	jobs, bad := c.jobs(sw)
	if bad != nil {
		return nil, nil, bad
	}
	wls, bad := c.workloads(sw.Namespace, sw.Spec.Workers)
	if bad != nil {
		return nil, nil, bad
	}
	var ae *assign.Error
	if err := assign.Check(jobs, sw.Spec.Dedicated); errors.As(err, &ae) {
		return nil, nil, &invalid{reason: ae.Reason, message: ae.Message}
	}
	return &validSpec{Jobs: jobs, Dedicated: sw.Spec.Dedicated, Workers: sw.Spec.Workers}, wls, nil
}

// lapsed marks the pods whose worker's Lease lapsed, and returns how soon
// the next one of those that hold a share would lapse (0: none).
func (c *Controller) lapsed(ns string, pods []plan.Pod, now time.Time) time.Duration {
	next := time.Duration(0)
	for i := range pods {
		obj, ok, _ := c.leases.GetByKey(ns + "/" + member.LeaseName(pods[i].Name))
		if !ok {
			continue // no Lease (yet): judged by its pod alone
		}
		l := obj.(*coordinationv1.Lease)
		if member.Released(l) {
			pods[i].Released = true
			continue
		}
		if c.members.Lapsed(l, now, member.DefaultDuration) {
			pods[i].Lapsed = true
			continue
		}
		if in := c.members.Until(l, member.DefaultDuration).Sub(now); in > 0 && (next == 0 || in < next) {
			next = in
		}
	}
	return next
}

// foreignPods are the pods that hold a share of c without being pods of the
// selected workloads (their labels changed, say): they may still run it, so
// their jobs are handed over like any leaving worker's. A pod Failed or
// Succeeded (evicted, say) runs nothing any more: its containers ended, so
// it counts as gone and its jobs move at once. A pod gone from the API
// whose worker's Lease is still held (force-deleted, its node unreachable:
// its worker may still run) counts as foreign too, until its Lease is
// released or lapses.
func (c *Controller) foreignPods(ns string, pods []plan.Pod, cfg config.Config) []plan.Pod {
	seen := make(map[string]bool, len(pods))
	for _, p := range pods {
		seen[p.Name] = true
	}
	var out []plan.Pod
	for name := range cfg.Workloads {
		if seen[name] {
			continue
		}
		obj, ok, _ := c.pods.GetByKey(ns + "/" + name)
		switch {
		case ok && !terminated(obj.(*corev1.Pod)):
			p := toPlanPod(obj.(*corev1.Pod))
			p.Foreign, p.Ready = true, false
			out = append(out, p)
		case !ok && c.leaseHeld(ns, name):
			out = append(out, plan.Pod{Name: name, Applied: plan.NoneApplied, Foreign: true})
		}
	}
	return out
}

// leaseHeld tells whether the Lease of the worker of pod has a holder.
func (c *Controller) leaseHeld(ns, pod string) bool {
	obj, ok, _ := c.leases.GetByKey(ns + "/" + member.LeaseName(pod))
	return ok && !member.Released(obj.(*coordinationv1.Lease))
}

// jobs reads the job list from the spec or its ConfigMap key.
func (c *Controller) jobs(sw *swarmv1.Swarm) ([]string, *invalid) {
	from := sw.Spec.JobsFrom
	if from == nil {
		return sw.Spec.Jobs, nil
	}
	if len(sw.Spec.Jobs) > 0 {
		return nil, invalidf(ReasonBadJobs, "spec.jobs and spec.jobsFrom are both set: keep one")
	}
	key := from.Key
	if key == "" {
		key = swarmv1.DefaultJobsKey
	}
	obj, ok, _ := c.configMaps.GetByKey(sw.Namespace + "/" + from.ConfigMap)
	if !ok {
		return nil, invalidf(ReasonJobsNotFound, "ConfigMap %s of spec.jobsFrom does not exist: create it with the key %q", from.ConfigMap, key)
	}
	text, bad := listText(obj.(*corev1.ConfigMap), key)
	if bad != nil {
		return nil, bad
	}
	jobs, err := config.ParseJobs(text)
	if err != nil {
		return nil, invalidf(ReasonBadJobs, "ConfigMap %s key %s: %v", from.ConfigMap, key, err)
	}
	return jobs, nil
}

// listText is the job list under key of cm: in data, or gzip-compressed in
// binaryData (a list past the 1 MiB a ConfigMap holds: 100,000 names of
// 13 characters weigh 1.4 MB, about 250 KB gzipped).
func listText(cm *corev1.ConfigMap, key string) (string, *invalid) {
	if text, ok := cm.Data[key]; ok {
		return text, nil
	}
	b, ok := cm.BinaryData[key]
	if !ok {
		return "", invalidf(ReasonJobsNotFound, "ConfigMap %s has no key %q: add the job list under it or fix spec.jobsFrom.key", cm.Name, key)
	}
	text, err := gunzip(b)
	if err != nil {
		return "", invalidf(ReasonBadJobs, "ConfigMap %s binaryData key %s is not gzip-compressed text (%v): write it with kubectl create configmap %s --from-file=%s=jobs.txt.gz",
			cm.Name, key, err, cm.Name, key)
	}
	return text, nil
}

// workloads are the StatefulSets and Deployments spec.workers selects.
func (c *Controller) workloads(ns string, workers metav1.LabelSelector) ([]workload, *invalid) {
	sel, err := metav1.LabelSelectorAsSelector(&workers)
	if err != nil {
		return nil, invalidf(ReasonBadSelector, "spec.workers: %v", err)
	}
	if sel.Empty() {
		return nil, invalidf(ReasonBadSelector, "spec.workers is empty: give the labels of the workers' StatefulSet or Deployment")
	}
	var out []workload
	add := func(meta metav1.ObjectMeta, podSel *metav1.LabelSelector, replicas *int32, stable bool) {
		labelsOf := meta.Labels
		if !sel.Matches(labels.Set(labelsOf)) {
			return
		}
		ps, err := metav1.LabelSelectorAsSelector(podSel)
		if err != nil || ps.Empty() {
			return
		}
		n := int32(1)
		if replicas != nil {
			n = *replicas
		}
		out = append(out, workload{selector: ps, replicas: n, stable: stable, name: meta.Name, uid: meta.UID})
	}
	for _, o := range c.inNamespace(c.statefulSets, ns) {
		s := o.(*appsv1.StatefulSet)
		add(s.ObjectMeta, s.Spec.Selector, s.Spec.Replicas, true)
	}
	for _, o := range c.inNamespace(c.deployments, ns) {
		d := o.(*appsv1.Deployment)
		add(d.ObjectMeta, d.Spec.Selector, d.Spec.Replicas, false)
	}
	if len(out) == 0 {
		return nil, invalidf(ReasonNoWorkload, "spec.workers (%s) matches no StatefulSet or Deployment in namespace %s: label the workers' workload or fix the selector", sel, ns)
	}
	return out, nil
}

func (c *Controller) inNamespace(idx interface {
	ByIndex(string, string) ([]any, error)
}, ns string) []any {
	list, _ := idx.ByIndex("namespace", ns)
	return list
}

// workerPods are the pods of the workloads (owned by them, not Failed nor
// Succeeded: a pod that carries the pool's labels by chance, or an evicted
// one, is no worker); settled is true when each runs exactly its desired
// number of pods, all Ready.
func (c *Controller) workerPods(wls []workload) (pods []plan.Pod, settled, stable bool) {
	seen := map[string]bool{}
	settled, stable = true, true
	for _, wl := range wls {
		stable = stable && wl.stable
		var total, ready int32
		for _, o := range c.inNamespace(c.pods, c.opts.Namespace) {
			p := o.(*corev1.Pod)
			if !wl.selector.Matches(labels.Set(p.Labels)) || !wl.owns(p, c.replicaSetOwner(c.opts.Namespace)) || terminated(p) {
				continue
			}
			pp := toPlanPod(p)
			total++
			if pp.Ready {
				ready++
			}
			if !seen[p.Name] {
				seen[p.Name] = true
				pods = append(pods, pp)
			}
		}
		settled = settled && total == wl.replicas && ready == wl.replicas
	}
	return pods, settled, stable
}

// terminated tells whether every container of p ended for good.
func terminated(p *corev1.Pod) bool {
	// trust: swarm.pod.phase
	return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
}

func toPlanPod(p *corev1.Pod) plan.Pod {
	pp := plan.Pod{Name: p.Name, UID: string(p.UID), Applied: plan.NoneApplied}
	// trust: swarm.pod.applied-version
	if v, err := strconv.ParseInt(p.Annotations[swarmv1.AppliedVersionAnnotation], 10, 64); err == nil && v >= 0 {
		pp.Applied = v
	}
	if p.DeletionTimestamp != nil {
		return pp
	}
	// trust: swarm.pod.ready
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
			pp.Ready = true
		}
	}
	return pp
}

// settled turns the workloads' state into the decision's: unsettled for
// longer than SettleTimeout counts as settled once, so a crash-looping pod
// does not freeze the assignment; the wait then starts over, so a pool that
// stays unsettled (a slow scale, a flapping pod) is reassigned at most once
// per SettleTimeout, not on every event.
func (c *Controller) settled(sw *swarmv1.Swarm, now bool, at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := sw.Namespace + "/" + sw.Name
	if now {
		delete(c.unsettled, key)
		delete(c.forced, key)
		return true
	}
	if c.forced[key] {
		return true // a reassignment made unsettled runs until its handover is done
	}
	since, ok := c.unsettled[key]
	if !ok {
		c.unsettled[key], since = at, at
	}
	if at.Sub(since) > c.opts.SettleTimeout {
		c.forced[key] = true
		return true
	}
	return false
}

// handedOver ends a reassignment made unsettled once nothing awaits: the
// next one waits a whole SettleTimeout again.
func (c *Controller) handedOver(sw *swarmv1.Swarm, awaiting int, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := sw.Namespace + "/" + sw.Name
	if c.forced[key] && awaiting == 0 {
		delete(c.forced, key)
		c.unsettled[key] = at
	}
}

// workersConfigMap is the workers' ConfigMap, nil when it does not exist.
func (c *Controller) workersConfigMap(sw *swarmv1.Swarm) (*corev1.ConfigMap, *invalid) {
	name := configMapName(sw)
	obj, ok, _ := c.configMaps.GetByKey(sw.Namespace + "/" + name)
	if !ok {
		return nil, nil
	}
	cm := obj.(*corev1.ConfigMap)
	if owner := cm.Labels[swarmv1.SwarmLabel]; owner != "" && owner != sw.Name {
		return nil, invalidf(ReasonConfigNotOwned, "ConfigMap %s belongs to Swarm %s: give this Swarm another spec.configMap", name, owner)
	}
	// trust: swarm.configmap.owner
	if !ownedBy(cm, sw) {
		return nil, invalidf(ReasonConfigNotOwned, "ConfigMap %s exists and is not this Swarm's (no %s=%s label and controller reference to it): "+
			"give this Swarm another spec.configMap, or delete %s to let the Swarm create it", name, swarmv1.SwarmLabel, sw.Name, name)
	}
	return cm, nil
}

// ownedBy tells whether cm is the workers' ConfigMap of sw as the
// controller writes it: labelled with sw, its one owner reference sw's
// controller reference. The admission policy refuses the controller's
// update of any other, so taking it over is not tried.
func ownedBy(cm *corev1.ConfigMap, sw *swarmv1.Swarm) bool {
	if cm.Labels[swarmv1.SwarmLabel] != sw.Name || len(cm.OwnerReferences) != 1 {
		return false
	}
	o := cm.OwnerReferences[0]
	return o.UID == sw.UID && o.Controller != nil && *o.Controller
}

func configMapName(sw *swarmv1.Swarm) string {
	if sw.Spec.ConfigMap != "" {
		return sw.Spec.ConfigMap
	}
	return sw.Name + swarmv1.ConfigMapSuffix
}

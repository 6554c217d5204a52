package agent

import (
	"context"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/upgrade"
)

// The watches of this node's own Node, its Jobs and their pods serve only
// work: a slot, a staging permit, a target this boot does not run, a
// staged release or swap to prune or undo, a Job that still runs. An
// agent with none of these (most agents, most of a fleet's life) closes
// them after Options.WorkWatchLinger and keeps its NodeUpdate watch only:
// the controller writes there whatever asks something of the node, and
// its event opens them again. At thousands of nodes that is three
// watches in four the API server holds for the agents, and no status
// write of an idle node (a kubelet's every few minutes, with its images)
// sent to its agent.
//
// The invariant: while they are closed, no Job of this node runs, and
// this process creates none (a slot's Pod counts as the Job it stands
// for: pods.go). They close only when their caches are
// synced and show no Job of the node unfinished nor one created unseen,
// and no sync holds them, none having taken them since that was read
// (workWatches.close). Every path that creates a Job or decides from
// one holds them open and synced first (Agent.holdWork), and createJob
// refuses without the hold. Closed, the stores are empty, and "no Job
// runs" read from them is what the invariant says, not ignorance; the
// finished Jobs a decision reads (a slot's Job, a rollback's history)
// are read only under the hold.
//
// The Node's part: they close only when the Node as last seen is settled
// (nodeSettled): no cordon of slipway's on it, this boot's versions
// published, nothing left that moved to the NodeUpdate, the views and
// reports in the NodeUpdate. Slipway writes the Node again only for a
// slot, which opens them first: a sync of a channel that asks anything
// of the node holds them (syncNode), as does the announce in a NodeUpdate
// made anew; a new spec.protocol opens them (protocolMoved). The readers
// that run without the hold (republish, the idle uncordon, the
// announce's clean-up) read no Node while closed and do nothing, which is
// what the settled Node asked of them. What is not
// seen while closed: another party stripping the version labels (they
// are published again when the watches next open).

// workWatches are the Node, Job and pod watches of this node and their caches.
type workWatches struct {
	mu        sync.Mutex
	open      bool                        // the informers run (synced or not)
	informers []cache.SharedIndexInformer // the Node, Job and pod informers while open
	cancel    context.CancelFunc          // stops the informers
	nodes     cache.Indexer               // this agent's own Node only
	jobs      ownJobs
	pods      ownPods
	users     int // syncs holding the watches (holdWork)
	// taken counts holds since the process started: a close decided from
	// a reading of the Jobs is called off if a hold came between.
	taken uint64
	// needed is when the node last had work: the watches close
	// WorkWatchLinger after it.
	needed time.Time
}

// closedWork is the closed state: empty stores.
func closedWork(node string) *workWatches {
	empty := func() cache.Indexer { return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}) }
	pods := empty()
	return &workWatches{nodes: empty(), jobs: ownJobs{empty(), pods, node}, pods: ownPods{pods, node}}
}

// synced reports (w.mu held) whether the informers filled their caches since they
// opened (false while closed).
func (w *workWatches) synced() bool {
	for _, inf := range w.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return len(w.informers) > 0
}

// nodeCache is this agent's own Node as the current cache shows it
// (none while the watches are closed).
func (a *Agent) nodeCache() cache.Indexer {
	a.watches.mu.Lock()
	defer a.watches.mu.Unlock()
	return a.watches.nodes
}

// jobCache is this node's Jobs as the current cache shows them (none while
// the watches are closed).
func (a *Agent) jobCache() ownJobs {
	a.watches.mu.Lock()
	defer a.watches.mu.Unlock()
	return a.watches.jobs
}

// podCache is the pods of this node's Jobs (none while closed).
func (a *Agent) podCache() ownPods {
	a.watches.mu.Lock()
	defer a.watches.mu.Unlock()
	return a.watches.pods
}

// holdWork keeps the work watches open for one sync that creates a Job or
// decides from one: ready when their caches are synced (then release must
// be called when the sync ends). When they are closed it opens them and
// says not ready: the sync ends, and their first fill queues every
// channel again.
func (a *Agent) holdWork() (ready bool, release func()) {
	w := a.watches
	w.mu.Lock()
	defer w.mu.Unlock()
	if !a.needWorkLocked() {
		return false, nil
	}
	if !w.synced() {
		return false, nil
	}
	w.users++
	w.taken++
	return true, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.users--
		w.needed = time.Now()
	}
}

// needWork counts the work watches needed now, and opens them when they
// are closed.
func (a *Agent) needWork() {
	a.watches.mu.Lock()
	defer a.watches.mu.Unlock()
	a.needWorkLocked()
}

// needWorkLocked is needWork with a.watches.mu held; it reports whether
// the watches were open.
func (a *Agent) needWorkLocked() bool {
	w := a.watches
	w.needed = time.Now()
	if !w.open {
		a.openWork()
		return false
	}
	return true
}

// holdsWork reports whether a sync holds the watches (createJob's check).
func (a *Agent) holdsWork() bool {
	a.watches.mu.Lock()
	defer a.watches.mu.Unlock()
	return a.watches.users > 0
}

// openWork starts the Node, Job and pod informers (a.watches.mu held).
// When the three caches are filled every channel is queued again, as are
// the readers that run without the hold, and the close check runs after
// the linger.
func (a *Agent) openWork() {
	w := a.watches
	ctx, cancel := context.WithCancel(a.runCtx)
	nodeInf, jobInf, podInf := a.nodeInformer(), a.jobInformer(), a.podInformer()
	w.nodes = nodeInf.GetIndexer()
	w.jobs, w.pods = ownJobs{jobInf.GetIndexer(), podInf.GetStore(), a.opts.NodeName}, ownPods{podInf.GetStore(), a.opts.NodeName} // only this node's (pods.go)
	w.informers = []cache.SharedIndexInformer{nodeInf, jobInf, podInf}
	w.open, w.cancel = true, cancel
	a.metrics.workOpen.Set(1)
	a.watchNode(nodeInf)
	a.watchJobs(jobInf, podInf)
	for _, inf := range []cache.SharedIndexInformer{nodeInf, jobInf, podInf} {
		go inf.RunWithContext(ctx)
	}
	go func() {
		if process.WaitSynced(ctx, nodeInf, jobInf, podInf) {
			a.log.Debug("watching this node's Node, Jobs and their pods")
			a.enqueueAll()
			for _, r := range []role{roleIdle, rolePublish, roleAnnounce} {
				a.queue.Add(key{role: r})
			}
			a.queue.AddAfter(key{role: roleWorkWatches}, a.opts.WorkWatchLinger)
		}
	}()
}

// watchNode queues every channel, the versions' publish and the heartbeat's
// wake when this agent's Node changes; and a channel whose view left the
// Node's annotations (before the views moved to the NodeUpdate).
func (a *Agent) watchNode(nodeInf cache.SharedIndexInformer) {
	// AddEventHandler fails only on a stopped informer; this one is new.
	_, _ = nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: a.nodeChanged, UpdateFunc: func(old, cur any) {
		a.viewsGone(old, cur)
		a.nodeChanged(cur)
	}})
}

// nodeChanged is what any change of this node's Node or NodeUpdate queues.
func (a *Agent) nodeChanged(any) {
	a.enqueueAll()
	a.queue.Add(key{role: rolePublish})
	a.wakeHeartbeat()
}

// watchJobs queues the sync of a channel when one of its Jobs on this node
// changes, or a pod of one succeeds, or one of its slot Pods changes or goes.
func (a *Agent) watchJobs(jobInf, podInf cache.SharedIndexInformer) {
	jobChanged := func(o any) {
		if j, ok := o.(*batchv1.Job); ok {
			a.queue.Add(key{roleNode, channelOf(j.ObjectMeta)})
		}
	}
	podChanged := func(o any) {
		// A slot Pod is the slot's Job (slotpod.go): any change of it
		// counts; of a Job's pod, its success (a second before the Job's).
		if p, ok := o.(*corev1.Pod); ok && (p.Status.Phase == corev1.PodSucceeded || protocol.SlotPodOfNode(p, a.opts.NodeName)) {
			a.queue.Add(key{roleNode, channelOf(p.ObjectMeta)})
		}
	}
	podGone := func(o any) {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if p, ok := o.(*corev1.Pod); ok && protocol.SlotPodOfNode(p, a.opts.NodeName) {
			a.queue.Add(key{roleNode, channelOf(p.ObjectMeta)})
		}
	}
	// AddEventHandler fails only on a stopped informer; these are new.
	_, _ = jobInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: jobChanged, UpdateFunc: func(_, o any) { jobChanged(o) }})
	_, _ = podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: podChanged, UpdateFunc: func(_, o any) { podChanged(o) }, DeleteFunc: podGone})
}

// waitWork waits until the work watches opened at start are filled.
func (a *Agent) waitWork(ctx context.Context) bool {
	a.watches.mu.Lock()
	infs := a.watches.informers
	a.watches.mu.Unlock()
	return len(infs) > 0 && process.WaitSynced(ctx, infs...)
}

// workNeeded reports whether this node has work that needs its Jobs
// read: a channel asks something of it (busy), or its system directory
// holds a release staged or a swap not booted (to activate, prune or
// undo). Jobs still running are the close's own check.
func (a *Agent) workNeeded() bool {
	if a.busy() {
		return true
	}
	running, current := a.readableVersions(), a.currentVersions()
	if running == nil || current == nil || current.Rootfs != running.Rootfs {
		return true
	}
	onDisk, err := upgrade.Prestaged(a.opts.SystemDir)
	return err != nil || len(onDisk) > 0
}

// nodeSettled reports whether this node's Node, as cached, asks nothing of
// the readers that run without the hold: no cordon of slipway's (the idle
// uncordon), this boot's versions published (republish), nothing left on
// it that moved to the NodeUpdate (the announce's clean-up); and whether
// the views and the reports are in the NodeUpdate, whose watch stays
// open (an agent of a cluster whose controller still writes views on the
// Node keeps watching it), and announced there.
func (a *Agent) nodeSettled() bool {
	n, u := a.ownNode(), a.ownObject()
	// trust: ops.agent.own-node-settled
	if n == nil || a.opts.NodeOnly || !viewsInObject(u) || !a.announcedIn(u) || drain.CordonedBy(n.Annotations) == protocol.CordonOwner {
		return false
	}
	for _, k := range protocol.MovedToNodeUpdate {
		if _, ok := n.Annotations[k]; ok {
			return false
		}
	}
	v, ok := a.getKnown()
	if !ok {
		return false
	}
	return a.versionsNow(v).shownOn(n)
}

// WorkWatchStep is what the close check does with the work watches.
type WorkWatchStep int

// The close check's steps.
const (
	WorkWatchKeep  WorkWatchStep = iota // open, and still wanted: look again later
	WorkWatchClose                      // close them now
	WorkWatchNone                       // closed: nothing to do
)

// WorkWatchState is what the close check decides from.
type WorkWatchState struct {
	Open, Synced bool
	Users        int  // syncs holding them
	Needed       bool // the node has work (workNeeded)
	JobsRunning  bool // a Job of this node is unfinished, or created and not seen yet
	// NodeSettled: the Node as cached asks nothing of the readers that run
	// without the hold (nodeSettled).
	NodeSettled bool
	// HeldMeanwhile: a sync took them between the reading of the Jobs
	// and the decision (it may have created one).
	HeldMeanwhile bool
	Idle          time.Duration // since the node last had work or a sync held them
	Linger        time.Duration
}

// nextWorkWatch decides whether the work watches close: only open and
// filled, held by no sync, with no work, no Job running and the Node
// settled for the whole linger. A cache not filled yet tells nothing of
// the Jobs nor of the Node.
func nextWorkWatch(s WorkWatchState) WorkWatchStep {
	switch {
	case !s.Open:
		return WorkWatchNone
	case !s.Synced || s.Users > 0 || s.Needed || s.JobsRunning || !s.NodeSettled || s.HeldMeanwhile || s.Idle < s.Linger:
		return WorkWatchKeep
	}
	return WorkWatchClose
}

// closeIdleWork is the close check (role roleWorkWatches): it closes the
// work watches when nextWorkWatch says so, and looks again later while
// they stay open.
func (a *Agent) closeIdleWork() {
	w := a.watches
	w.mu.Lock()
	taken, open := w.taken, w.open
	w.mu.Unlock()
	if !open {
		return
	}
	needed := a.workNeeded()
	running := a.jobsBusy()    // from the caches read now, before the lock below
	settled := a.nodeSettled() // likewise
	w.mu.Lock()
	defer w.mu.Unlock()
	if needed {
		w.needed = time.Now()
	}
	st := WorkWatchState{Open: w.open, Synced: w.synced(), Users: w.users, Needed: needed, JobsRunning: running,
		NodeSettled: settled, HeldMeanwhile: w.taken != taken, Idle: time.Since(w.needed), Linger: a.opts.WorkWatchLinger}
	switch nextWorkWatch(st) {
	case WorkWatchClose:
		w.cancel()
		fresh := closedWork(a.opts.NodeName)
		w.open, w.nodes, w.jobs, w.pods, w.informers, w.cancel = false, fresh.nodes, fresh.jobs, fresh.pods, nil, nil
		a.metrics.workOpen.Set(0)
		a.log.Debug("closed the watches of this node's Node, Jobs and their pods: no work", "for", st.Idle.Round(time.Second))
	case WorkWatchKeep:
		a.queue.AddAfter(key{role: roleWorkWatches}, max(a.opts.WorkWatchLinger-st.Idle, time.Second))
	}
}

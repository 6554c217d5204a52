package agent

import (
	"context"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"slipway.dev/slipway/upgrade"
)

// The watches of this node's Jobs and their pods serve only work: a slot,
// a staging permit, a staged release or swap to prune or undo, a Job that
// still runs. An agent with none of these (most agents, most of a fleet's
// life) closes them after Options.WorkWatchLinger and keeps its Node and
// NodeUpdate watches only: at thousands of nodes, half the watches the
// API server holds for the agents.
//
// The invariant: while they are closed, no Job of this node runs, and
// this process creates none. They close only when their caches are
// synced and show no Job of the node unfinished nor one created unseen,
// and no sync holds them, none having taken them since that was read
// (workWatches.close). Every path that creates a Job or decides from
// one holds them open and synced first (Agent.holdWork), and createJob
// refuses without the hold. Closed, the stores are empty, and "no Job
// runs" read from them is what the invariant says, not ignorance; the
// finished Jobs a decision reads (a slot's Job, a rollback's history)
// are read only under the hold.

// workWatches are the Job and pod watches of this node and their caches.
type workWatches struct {
	mu     sync.Mutex
	open   bool               // the informers run (synced or not)
	synced func() bool        // both caches filled since they opened
	cancel context.CancelFunc // stops the informers
	jobs   ownJobs
	pods   ownPods
	users  int // syncs holding the watches (holdWork)
	// taken counts holds since the process started: a close decided from
	// a reading of the Jobs is called off if a hold came between.
	taken uint64
	// needed is when the node last had work: the watches close
	// WorkWatchLinger after it.
	needed time.Time
}

// closedWork is the closed state: empty stores.
func closedWork(node string) *workWatches {
	return &workWatches{jobs: ownJobs{cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), node},
		pods: ownPods{cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}), node}, synced: func() bool { return false }}
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
	w.needed = time.Now()
	if !w.open {
		a.openWork()
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

// holdsWork reports whether a sync holds the watches (createJob's check).
func (a *Agent) holdsWork() bool {
	a.watches.mu.Lock()
	defer a.watches.mu.Unlock()
	return a.watches.users > 0
}

// openWork starts the Job and pod informers (a.watches.mu held). When both
// caches are filled every channel is queued again, and the close check
// runs after the linger.
func (a *Agent) openWork() {
	w := a.watches
	ctx, cancel := context.WithCancel(a.runCtx)
	jobInf, podInf := a.jobInformer(), a.podInformer()
	w.jobs, w.pods = ownJobs{jobInf.GetIndexer(), a.opts.NodeName}, ownPods{podInf.GetStore(), a.opts.NodeName} // only this node's (pods.go)
	w.synced = func() bool { return jobInf.HasSynced() && podInf.HasSynced() }
	w.open, w.cancel = true, cancel
	a.metrics.workOpen.Set(1)
	a.watchJobs(jobInf, podInf)
	go jobInf.RunWithContext(ctx)
	go podInf.RunWithContext(ctx)
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), jobInf.HasSynced, podInf.HasSynced) {
			a.log.Debug("watching this node's Jobs and their pods")
			a.enqueueAll()
			a.queue.Add(key{role: roleIdle})
			a.queue.AddAfter(key{role: roleWorkWatches}, a.opts.WorkWatchLinger)
		}
	}()
}

// watchJobs queues the sync of a channel when one of its Jobs on this node
// changes, or a pod of one succeeds.
func (a *Agent) watchJobs(jobInf, podInf cache.SharedIndexInformer) {
	jobChanged := func(o any) {
		if j, ok := o.(*batchv1.Job); ok {
			a.queue.Add(key{roleNode, channelOf(j.ObjectMeta)})
		}
	}
	podChanged := func(o any) {
		if p, ok := o.(*corev1.Pod); ok && p.Status.Phase == corev1.PodSucceeded {
			a.queue.Add(key{roleNode, channelOf(p.ObjectMeta)})
		}
	}
	// AddEventHandler fails only on a stopped informer; these are new.
	_, _ = jobInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: jobChanged, UpdateFunc: func(_, o any) { jobChanged(o) }})
	_, _ = podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: podChanged, UpdateFunc: func(_, o any) { podChanged(o) }})
}

// waitWork waits until the work watches opened at start are filled.
func (a *Agent) waitWork(ctx context.Context) bool {
	a.watches.mu.Lock()
	synced := a.watches.synced
	a.watches.mu.Unlock()
	return cache.WaitForCacheSync(ctx.Done(), synced)
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
	// HeldMeanwhile: a sync took them between the reading of the Jobs
	// and the decision (it may have created one).
	HeldMeanwhile bool
	Idle          time.Duration // since the node last had work or a sync held them
	Linger        time.Duration
}

// nextWorkWatch decides whether the work watches close: only open and
// filled, held by no sync, with no work and no Job running for the whole
// linger. A cache not filled yet tells nothing of the Jobs.
func nextWorkWatch(s WorkWatchState) WorkWatchStep {
	switch {
	case !s.Open:
		return WorkWatchNone
	case !s.Synced || s.Users > 0 || s.Needed || s.JobsRunning || s.HeldMeanwhile || s.Idle < s.Linger:
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
	running := a.jobsBusy() // from the caches read now, before the lock below
	w.mu.Lock()
	defer w.mu.Unlock()
	if needed {
		w.needed = time.Now()
	}
	st := WorkWatchState{Open: w.open, Synced: w.synced(), Users: w.users, Needed: needed,
		JobsRunning: running, HeldMeanwhile: w.taken != taken, Idle: time.Since(w.needed), Linger: a.opts.WorkWatchLinger}
	switch nextWorkWatch(st) {
	case WorkWatchClose:
		w.cancel()
		fresh := closedWork(a.opts.NodeName)
		w.open, w.jobs, w.pods, w.synced, w.cancel = false, fresh.jobs, fresh.pods, fresh.synced, nil
		a.metrics.workOpen.Set(0)
		a.log.Debug("closed the watches of this node's Jobs and their pods: no work", "for", st.Idle.Round(time.Second))
	case WorkWatchKeep:
		a.queue.AddAfter(key{role: roleWorkWatches}, max(a.opts.WorkWatchLinger-st.Idle, time.Second))
	}
}

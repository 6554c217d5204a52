// Package member is a swarm worker's membership: a Lease of its own, named
// after its pod, that the worker renews while it may run jobs. A worker that
// cannot renew it stops its jobs when its tenure ends (RenewDeadline after
// the last renewal it began); the controller gives the jobs of a worker
// away only once the Lease went unrenewed for its whole duration, measured
// on the controller's own clock from when it first saw the last renewal.
// The tenure thus always ends first, Duration − RenewDeadline sooner, as
// for the controllers' own Leases (package ops/lease).
package member

import (
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"slipway.dev/slipway/ops/lease"
)

// LeasePrefix starts the name of every worker's Lease.
const LeasePrefix = "swarm-worker."

// LeaseName is the Lease of the worker in pod.
func LeaseName(pod string) string { return LeasePrefix + pod }

// DefaultDuration is how long a worker's Lease lasts unrenewed.
const DefaultDuration = 15 * time.Second

// Timing are a worker Lease's durations.
type Timing struct {
	// Duration: after it unrenewed, the controller gives the jobs away.
	Duration time.Duration
	// RenewDeadline: after it without a renewal, the worker stops its jobs.
	RenewDeadline time.Duration
	// Retry is the wait between renewals.
	Retry time.Duration
	// StopGrace is how long the worker waits for its command to stop
	// before it kills it: the stop is over before Duration is.
	StopGrace time.Duration
}

// TimingOf derives the durations from d (DefaultDuration when not positive):
// renew every d/5, stop after 2d/3 unrenewed, kill within d/6.
func TimingOf(d time.Duration) Timing {
	if d <= 0 {
		d = DefaultDuration
	}
	return Timing{Duration: d, RenewDeadline: d * 2 / 3, Retry: d / 5, StopGrace: d / 6}
}

// Observer is the controller's judge of the workers' Leases: whether each
// is still renewed, on its own clock.
type Observer struct {
	mu   sync.Mutex
	seen map[string]observed
}

type observed struct {
	version string
	at      time.Time
}

// NewObserver is an Observer that has seen nothing.
func NewObserver() *Observer { return &Observer{seen: map[string]observed{}} }

// Observe records l as read at now: a new holder or renewal restarts its
// clock (the controller's own writes, such as MinVersionAnnotation, do not).
func (o *Observer) Observe(l *coordinationv1.Lease, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s, ok := o.seen[l.Name]; !ok || s.version != renewal(l) {
		o.seen[l.Name] = observed{version: renewal(l), at: now}
	}
}

// renewal identifies l's holder and last renewal.
func renewal(l *coordinationv1.Lease) string {
	holder, at := "", ""
	// trust: swarm.lease.holder
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		at = l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	return holder + "@" + at
}

// Forget drops a deleted Lease.
func (o *Observer) Forget(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.seen, name)
}

// Lapsed tells whether the worker holding l runs nothing at now: it
// released l (its holder is empty) or left it unrenewed for its duration
// since this observer first saw its current content. A Lease not observed
// yet counts from now.
func (o *Observer) Lapsed(l *coordinationv1.Lease, now time.Time, fallback time.Duration) bool {
	o.Observe(l, now)
	o.mu.Lock()
	at := o.seen[l.Name].at
	o.mu.Unlock()
	return lease.Decide(now, l, "\x00swarm-controller", at, fallback) == lease.Take
}

// Released tells whether l has no holder: its worker left, its jobs
// stopped, or none has taken it yet.
func Released(l *coordinationv1.Lease) bool {
	// trust: swarm.lease.holder
	return l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == ""
}

// Until is when l lapses unless renewed (zero when it already did).
func (o *Observer) Until(l *coordinationv1.Lease, fallback time.Duration) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, ok := o.seen[l.Name]
	// trust: swarm.lease.holder
	if !ok || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return time.Time{}
	}
	d := fallback
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return s.at.Add(d)
}

// MinVersionAnnotation, on a worker's Lease, is written by the controller
// before it gives away the jobs of a worker it judged to run nothing (its
// Lease lapsed, or its pod is gone): the config version from which that
// worker's share no longer holds them. A worker that (re)takes its Lease
// reads it and runs no share of an older config, so a mounted file that
// has not caught up yet cannot start jobs that run elsewhere now.
const MinVersionAnnotation = "swarm.slipway.dev/min-config-version"

// MinVersion is l's MinVersionAnnotation, 0 when unset or unreadable.
func MinVersion(l *coordinationv1.Lease) int64 {
	// trust: swarm.lease.min-version
	v, err := strconv.ParseInt(l.Annotations[MinVersionAnnotation], 10, 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// WithMinVersion is a copy of l whose MinVersionAnnotation is at least v.
func WithMinVersion(l *coordinationv1.Lease, v int64) *coordinationv1.Lease {
	next := l.DeepCopy()
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[MinVersionAnnotation] = strconv.FormatInt(max(v, MinVersion(l)), 10)
	return next
}

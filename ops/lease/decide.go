// Package lease elects one holder of a coordination/v1 Lease among
// candidates: it acquires the Lease when it is free or its holder stopped
// renewing it, renews it while holding it, and releases it on stop, with
// optimistic concurrency (every write carries the resourceVersion it read).
//
// It replaces client-go's tools/leaderelection, whose import alone links and
// initialises client-go's scheme of every Kubernetes API group, about a
// third of an agent's resident memory (see package ops/kube).
package lease

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// Action is what a candidate does with the Lease it read.
type Action int

const (
	// Wait: another holder renews the Lease in time; leave it alone.
	Wait Action = iota
	// Take: the Lease is free (released, or its holder stopped renewing
	// it); write this candidate as the new holder.
	Take
	// Renew: this candidate holds the Lease; write a new renewTime.
	Renew
)

func (a Action) String() string {
	switch a {
	case Take:
		return "take"
	case Renew:
		return "renew"
	}
	return "wait"
}

// Decide says what candidate me does with l, read at now. Whether the
// holder still renews is judged on this candidate's clock, not on the
// renewTime the holder wrote (clocks of nodes differ): observed is when this
// candidate first read l's current content, and the holder has
// leaseDurationSeconds from then. fallback is the duration assumed when l
// states none.
func Decide(now time.Time, l *coordinationv1.Lease, me string, observed time.Time, fallback time.Duration) Action {
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	switch {
	case holder == me:
		return Renew
	case holder == "":
		return Take
	case now.After(observed.Add(duration(l, fallback))):
		return Take
	}
	return Wait
}

// duration is the Lease's leaseDurationSeconds, or fallback when unset.
func duration(l *coordinationv1.Lease, fallback time.Duration) time.Duration {
	if s := l.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		return time.Duration(*s) * time.Second
	}
	return fallback
}

package benchside

import "time"

// Shape is what bounds a rollout from below whatever the software does:
// the host's own times and the limits on how many nodes do them at once.
type Shape struct {
	Nodes       int
	Concurrency int           // nodes in a slot at once (drained, rebooting)
	Stage       time.Duration // one node's staging (a download), ahead of its slot
	StageAtOnce int           // nodes staging at once; 0: staging is part of the slot
	Slot        time.Duration // a slot's host time: the upgrade, rebootDelay and reboot
}

// Floor is the rollout's physical floor: its wall if every step that is
// not host time took none. Nodes take their slots in order, Concurrency at
// a time, each as soon as a slot is free and (when staging runs ahead) its
// own staging is done; the nodes stage in the same order, StageAtOnce at a
// time. With staging in the slot each slot lasts Stage + Slot. For the
// staged shape of 100 nodes (30 s staging 25 at once, 20 s reboots, 10 at
// once) it is 30 s + 10 x 20 s = 230 s; for the no-op shape (no host
// time) it is 0: the wall is then all software, Kubernetes' and the
// contender's.
func Floor(s Shape) time.Duration {
	if s.Nodes <= 0 || s.Concurrency <= 0 {
		return 0
	}
	slot, ahead := s.Slot, s.StageAtOnce > 0
	if !ahead {
		slot += s.Stage
	}
	free := make([]time.Duration, s.Concurrency) // when each slot is next free
	var end time.Duration
	for i := range s.Nodes {
		lane := i % s.Concurrency // in-order grants to identical slots free them in turn
		start := free[lane]
		if ahead {
			start = max(start, time.Duration(i/s.StageAtOnce+1)*s.Stage)
		}
		free[lane] = start + slot
		end = max(end, free[lane])
	}
	return end
}

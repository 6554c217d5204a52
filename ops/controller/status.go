package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// errSlotGone: the slot a drain works for was freed or replaced meanwhile.
var errSlotGone = errors.New("the slot is no longer held")

// updateStatus applies mutate to the channel's status and writes it with
// optimistic concurrency: on a conflict it re-reads the channel and applies
// mutate again, so every write is decided on the latest state. mutate
// returns an error to abort (nothing is written). It returns the channel as
// written (or as read, when mutate changed nothing).
func (ctl *Controller) updateStatus(ctx context.Context, name string, mutate func(*v1.UpdateChannel) error) (*v1.UpdateChannel, error) {
	cur, err := ctl.channelNow(name)
	if err != nil {
		return nil, err
	}
	api := ctl.ops.UpdateChannels(ctl.opts.Namespace)
	for attempt := 0; ; attempt++ {
		next := cur.DeepCopy()
		if err := mutate(next); err != nil {
			return nil, err
		}
		if equality.Semantic.DeepEqual(cur.Status, next.Status) {
			return cur, nil
		}
		written, err := api.UpdateStatus(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			ctl.noteWritten(written)
			return written, nil
		}
		if !apierrors.IsConflict(err) || attempt >= 20 {
			return nil, fmt.Errorf("write the status of channel %s: %w", name, err)
		}
		ctl.metrics.conflicts.Inc()
		if cur, err = api.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("re-read channel %s after a conflict: %w", name, err)
		}
	}
}

// channelNow is the channel as the cache has it, or as this process last
// wrote it when the cache does not show that write yet: passes that follow
// each other faster than the watch would otherwise decide on a status
// older than their own last write (a conflict, a retry, and views written
// from the older status).
func (ctl *Controller) channelNow(name string) (*v1.UpdateChannel, error) {
	cur, err := ctl.channels.UpdateChannels(ctl.opts.Namespace).Get(name)
	if err != nil {
		return nil, fmt.Errorf("read channel %s: %w", name, err)
	}
	ctl.mu.Lock()
	mine := ctl.lastWritten[name]
	ctl.mu.Unlock()
	if mine != nil && mine.UID == cur.UID && olderThan(cur.ResourceVersion, mine.ResourceVersion) {
		return mine, nil
	}
	return cur, nil
}

// noteWritten remembers ch as this process wrote it (channelNow).
func (ctl *Controller) noteWritten(ch *v1.UpdateChannel) {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	if ctl.lastWritten == nil {
		ctl.lastWritten = map[string]*v1.UpdateChannel{}
	}
	ctl.lastWritten[ch.Name] = ch
}

// olderThan reports whether resource version rv is older than than. The
// API server's resource versions are etcd revisions, integers that only
// grow; one that does not parse is never called older (the cache wins).
func olderThan(rv, than string) bool {
	x, err1 := strconv.ParseUint(rv, 10, 64)
	y, err2 := strconv.ParseUint(than, 10, 64)
	return err1 == nil && err2 == nil && x < y
}

package updateoperator

import (
	"context"
	"errors"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"slipway.dev/slipway/ops/internal/wallclock"
)

// stepWorkers bounds the node writes one turn of the controller has in
// flight at once.
const stepWorkers = 16

// parallel calls fn for each item, at most stepWorkers at once, and
// returns when every call has.
func parallel[T any](items []T, fn func(T)) {
	sem := make(chan struct{}, stepWorkers)
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(it)
		}()
	}
	wg.Wait()
}

// start gives each started node its first intent: prepare-update, or,
// prepared ahead, perform-update (and it no longer counts as ahead).
func (c *controller) start(ctx context.Context, nodes map[string]*corev1.Node, views []NodeView, start []string) error {
	ahead := map[string]bool{}
	for _, v := range views {
		ahead[v.Name] = v.Ahead
	}
	var mu sync.Mutex
	var errs []error
	parallel(start, func(name string) {
		// trust: uo.node.available-version
		if err := c.startOne(ctx, name, nodes[name].Annotations[c.keys.Key(KeyAvailableVersion)], ahead[name]); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	return errors.Join(errs...)
}

func (c *controller) startOne(ctx context.Context, name, version string, ahead bool) error {
	if !ahead {
		return c.wantTarget(ctx, name, IntentPrepare, version, "update to "+version)
	}
	err := c.patch(ctx, name, nil, map[string]any{c.keys.Wanted(): string(IntentPerform),
		c.keys.Key(KeyTransition): stamp(wallclock.Now()), c.keys.Key(KeyAhead): nil})
	if err != nil {
		return err
	}
	c.ev.emit(ctx, name, corev1.EventTypeNormal, ReasonIntent, "intent %s: its turn to update to %s (prepared ahead)", IntentPerform, version)
	return nil
}

// wantAhead tells node to prepare-update ahead of its turn.
func (c *controller) wantAhead(ctx context.Context, node, version string) error {
	err := c.patch(ctx, node, nil, map[string]any{c.keys.Wanted(): string(IntentPrepare),
		c.keys.Key(KeyTransition): stamp(wallclock.Now()), c.keys.Key(KeyAhead): "true", c.keys.Key(KeyTargetVersion): nilIfEmpty(version)})
	if err != nil {
		return err
	}
	c.ev.emit(ctx, node, corev1.EventTypeNormal, ReasonIntent, "intent %s ahead of its turn: download and verify %s, nothing switched", IntentPrepare, version)
	return nil
}

// wantTarget writes an intent that starts an update, with the version
// chosen for it (the update succeeds only when the node runs it).
func (c *controller) wantTarget(ctx context.Context, node string, i Intent, version, why string) error {
	err := c.patch(ctx, node, nil, map[string]any{c.keys.Wanted(): string(i), c.keys.Key(KeyTransition): stamp(wallclock.Now()),
		c.keys.Key(KeyTargetVersion): nilIfEmpty(version)})
	if err != nil {
		return err
	}
	c.ev.emit(ctx, node, corev1.EventTypeNormal, ReasonIntent, "intent %s: %s", i, why)
	return nil
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

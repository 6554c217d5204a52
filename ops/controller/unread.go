package controller

import (
	"errors"

	"slipway.dev/slipway/ops/internal/answer"
)

// errUnread is a drain step that got no answer from the API server (it
// timed out, was too busy, or could not be reached) to a request the step
// needed: the read of its slot or its Node before the cordon, the cordon
// itself, or a request of the drain under way (a list of the node's pods,
// an eviction, the slot's confirmation before one). Nothing of it is
// recorded: the slot is kept and the step asks again after heldRecheck,
// as a step held back by another node does; it is not the step's failure
// (a loaded control plane's 504 before a drain used to fail the upgrade and
// give the slot back). A write without an answer may have landed: the next
// attempt reads the Node first, and resumes a cordon it finds (drainBudget).
type errUnread struct{ err error }

func (e *errUnread) Error() string { return "no answer yet: " + e.err.Error() }
func (e *errUnread) Unwrap() error { return e.err }

// unreadOr is err as an *errUnread when it is a request's want of an
// answer (answer.Unanswered), else err as it is. A slot found gone is an
// answer, even when it reaches the caller inside a transport's error (the
// drain client's confirmation refuses an eviction with errSlotGone).
func unreadOr(err error) error {
	if !errors.Is(err, errSlotGone) && answer.Unanswered(err) {
		return &errUnread{err: err}
	}
	return err
}

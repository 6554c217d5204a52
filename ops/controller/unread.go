package controller

import "slipway.dev/slipway/ops/internal/answer"

// errUnread is a step that could not read what it decides from (its slot,
// its Node) before it wrote anything, for want of an answer: the API
// server timed out, was too busy, or could not be reached. The slot is
// kept and the step asks again after heldRecheck, as a step held back by
// another node does; it is not the step's failure (a loaded control
// plane's 504 before a drain used to fail the upgrade and give the slot
// back).
type errUnread struct{ err error }

func (e *errUnread) Error() string { return "no answer yet: " + e.err.Error() }
func (e *errUnread) Unwrap() error { return e.err }

// unreadOr is err as an *errUnread when it is a read's want of an answer
// (answer.Unanswered), else err as it is.
func unreadOr(err error) error {
	if answer.Unanswered(err) {
		return &errUnread{err: err}
	}
	return err
}

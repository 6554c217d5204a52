package controller

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

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
// (unanswered), else err as it is.
func unreadOr(err error) error {
	if unanswered(err) {
		return &errUnread{err: err}
	}
	return err
}

// unanswered tells whether err, a read's error, is no answer yet rather
// than the API server's answer: a timeout (408, 504), too many requests
// (429), a server error (5xx), or no HTTP answer at all (a refused, reset
// or dropped connection, the client's own timeout). An answer below 500
// (forbidden, not found, invalid) is an answer, a context canceled is
// this process stopping, and any other error (a body that does not
// decode) is not a wait: none is asked again.
func unanswered(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, errSlotGone) {
		return false
	}
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		code := s.Status().Code
		return code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500
	}
	var transport *url.Error // client-go's request that got no HTTP answer
	return errors.As(err, &transport) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

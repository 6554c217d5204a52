// Package answer tells an API server's answer from the want of one: a
// request that got no answer yet (a timeout, too many requests, a server
// error, a dropped connection) may be asked again, in this process, and is
// nobody's failure; an answer (forbidden, not found, invalid) is final.
package answer

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Unanswered tells whether err, a request's error, is no answer yet rather
// than the API server's answer: a timeout (408, 504), too many requests
// (429), a server error (5xx), or no HTTP answer at all (a refused, reset
// or dropped connection, the client's own timeout). An answer below 500
// (forbidden, not found, invalid) is an answer, a context canceled is this
// process stopping, and any other error (a body that does not decode) is
// not a wait: none is asked again. For a write, no answer does not say
// the write was not applied (see the update operator's Refused).
func Unanswered(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
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

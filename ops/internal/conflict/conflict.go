// Package conflict retries a read-modify-write that lost a race, as
// client-go's retry.RetryOnConflict does, but never takes a write whose
// context ended for a write made.
package conflict

import "k8s.io/client-go/util/retry"

// Retry is retry.RetryOnConflict(retry.DefaultRetry, fn) returning fn's
// own last error. client-go's takes an error that wraps context.Canceled
// or context.DeadlineExceeded for the end of its own backoff and returns
// the last conflict instead, none on a first try: a write whose context
// had ended (its leader stopping) looked made.
func Retry(fn func() error) error {
	var last error
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error { last = fn(); return last })
	if last != nil {
		return last
	}
	return err
}

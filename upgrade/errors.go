package upgrade

import (
	"errors"

	"slipway.dev/slipway/upgrade/channel"
	"slipway.dev/slipway/upgrade/lock"
)

// Errors callers can tell apart with errors.Is; each has its own exit code.
var (
	ErrVerify     = errors.New("verification failed")
	ErrNoSpace    = errors.New("not enough free space")
	ErrReadOnly   = errors.New("system directory is read-only")
	ErrNoRollback = errors.New("nothing to roll back to")
	ErrLocked     = lock.ErrLocked
	ErrNotFound   = channel.ErrNotFound
)

// Exit codes of `slipway ops upgrade|rollback|status`.
const (
	ExitOK         = 0
	ExitFailure    = 1 // anything else
	ExitUsage      = 2 // bad flags or arguments
	ExitLocked     = 3 // another upgrade holds the lock
	ExitVerify     = 4 // checksum mismatch or truncated artifact
	ExitNotFound   = 5 // unknown version or missing artifact
	ExitNoSpace    = 6 // not enough free space in the system directory
	ExitReadOnly   = 7 // read-only system directory and no --remount
	ExitNoRollback = 8 // no previous version
)

// ExitCode maps an error of Run, Rollback or Status to the exit status.
func ExitCode(err error) int {
	for _, c := range []struct {
		err  error
		code int
	}{
		{ErrLocked, ExitLocked}, {ErrVerify, ExitVerify}, {ErrNotFound, ExitNotFound},
		{ErrNoSpace, ExitNoSpace}, {ErrReadOnly, ExitReadOnly}, {ErrNoRollback, ExitNoRollback},
	} {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	if err == nil {
		return ExitOK
	}
	return ExitFailure
}

// Package lock is the host-wide upgrade lock: an flock(2) on a lock file
// that records who holds it. The kernel drops the flock when its holder
// dies, so a file left by a killed run never blocks the next one.
package lock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultPath is where k3os kept its upgrade lock.
const DefaultPath = "/run/k3os/upgrade.lock"

// ErrLocked is wrapped when another process holds the lock.
var ErrLocked = errors.New("another upgrade holds the lock")

// Lock is a held lock; Release it when done.
type Lock struct{ f *os.File }

// Acquire takes the lock at path without waiting, creating the file and its
// folder if needed, and records this process (pid, command, start time) in
// it. When another process holds it, the error wraps ErrLocked and names
// that holder.
func Acquire(path, command string) (*Lock, error) {
	if path == "" {
		return nil, errors.New("no lock file given: pass --lock-file")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create lock folder: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s, lock file %s): wait for it to finish, or stop that process", ErrLocked, holder, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	info := fmt.Sprintf("pid=%d\ncommand=%s\nstarted=%s\n", os.Getpid(), command, time.Now().UTC().Format(time.RFC3339))
	// The record only improves a concurrent run's message; failing to
	// write it does not weaken the lock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(info), 0)
	}
	return &Lock{f: f}, nil
}

// Release drops the lock. The file stays; its content is stale but harmless.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor drops the flock
	l.f = nil
	return err
}

// readHolder describes the holder from the lock file's content.
func readHolder(f *os.File) string {
	buf := make([]byte, 4096)
	n, _ := f.ReadAt(buf, 0)
	fields := map[string]string{}
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			fields[k] = v
		}
	}
	if fields["pid"] == "" {
		return "holder unknown"
	}
	return fmt.Sprintf("pid %s, %q, since %s", fields["pid"], fields["command"], fields["started"])
}

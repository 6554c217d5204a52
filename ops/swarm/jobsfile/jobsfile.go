// Package jobsfile is the handover between `slipway swarm worker --out` and
// the application beside it: the jobs file the worker writes and the
// acknowledgement file the application writes back.
//
// The jobs file holds one job per line after a header of `#` lines:
//
//	# swarm-version: 9
//	# swarm-valid-until: 2026-11-28T03:25:41.52Z
//	cam-02
//	cam-05
//
// swarm-version is the version of the share the jobs come from (0 when the
// worker stopped every job: no share runs). It grows each time a job
// changes hands, so it is a fencing token: a store that records, per job,
// the highest version it saw can refuse a write carrying a lower one (it
// comes from a worker the job was taken from). swarm-valid-until is when
// the worker's tenure ends unless it renews its Lease (the worker rewrites
// the file with the new deadline after each renewal): an application that
// finds it past stops every job by itself, so a worker that is paused
// (SIGSTOP), crash-looping or cut off cannot leave jobs running after the
// controller may have handed them out; the controller does so no sooner
// than a third of the Lease duration after that deadline, the time the
// application has to stop. An application that reads the file skips lines
// starting with `#` (as the Swarm's own job lists do).
//
// The acknowledgement file (`--ack`) holds one number: the swarm-version of
// the jobs file whose jobs bound what the application runs now, that is, it
// runs no job outside that file (0: it runs nothing). The application keeps
// it true at every instant by moving from one file to the next in this
// order: stop the jobs the new file no longer lists, write the new file's
// version to the acknowledgement file, start the jobs it adds. On its way
// out it stops every job and writes 0. The worker confirms a share to the
// controller (which then hands the jobs taken from it to other workers), and
// releases its Lease when it stops, only once the application acknowledged.
package jobsfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// VersionKey names the header line of the share version.
const VersionKey = "swarm-version"

// File is a jobs file's content.
type File struct {
	// Version is the share's version, 0 when no share runs.
	Version int64
	// ValidUntil is when the jobs must stop unless a newer file says
	// otherwise (zero: no deadline, a worker without a Lease).
	ValidUntil time.Time
	Jobs       []string
}

// ValidUntilKey names the header line of the validity deadline.
const ValidUntilKey = "swarm-valid-until"

// Valid tells whether the jobs may run at now.
func (f File) Valid(now time.Time) bool { return f.ValidUntil.IsZero() || now.Before(f.ValidUntil) }

// Render is f as the file's text.
func (f File) Render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: %d\n", VersionKey, f.Version)
	if !f.ValidUntil.IsZero() {
		fmt.Fprintf(&b, "# %s: %s\n", ValidUntilKey, f.ValidUntil.UTC().Format(time.RFC3339Nano))
	}
	for _, j := range f.Jobs {
		b.WriteString(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// Parse reads a jobs file's text. Lines starting with # other than the
// header are skipped, as are blank ones; a file without a version header
// has version 0.
func Parse(text string) (File, error) {
	var f File
	for _, line := range strings.Split(text, "\n") {
		l := strings.TrimSpace(line)
		switch {
		case l == "":
		case strings.HasPrefix(l, "#"):
			k, v, ok := strings.Cut(strings.TrimSpace(l[1:]), ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch strings.TrimSpace(k) {
			case VersionKey:
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 0 {
					return File{}, fmt.Errorf("jobs file: %s %q is not a version", VersionKey, v)
				}
				f.Version = n
			case ValidUntilKey:
				at, err := time.Parse(time.RFC3339Nano, v)
				if err != nil {
					return File{}, fmt.Errorf("jobs file: %s %q is not an RFC 3339 time", ValidUntilKey, v)
				}
				f.ValidUntil = at
			}
		default:
			f.Jobs = append(f.Jobs, l)
		}
	}
	return f, nil
}

// Read reads and parses the jobs file at path; a missing file is version 0
// with no jobs.
func Read(path string) (File, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return File{}, nil
	}
	if err != nil {
		return File{}, fmt.Errorf("read the jobs file: %w", err)
	}
	return Parse(string(b))
}

// Write replaces path with text atomically (a temporary file in the same
// directory, renamed over it).
func Write(path, text string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.WriteString(text); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}

// WriteAck records, in the acknowledgement file at path, that the
// application runs no job outside the jobs file of version (0: nothing).
func WriteAck(path string, version int64) error {
	return Write(path, strconv.FormatInt(version, 10)+"\n")
}

// ReadAck reads the acknowledgement file: the version acknowledged, and
// false while there is none (no file yet, or not a number).
func ReadAck(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// Confirms tells whether an acknowledgement of acked bounds what the
// application runs by the jobs file of version: the same version, or
// nothing at all.
func Confirms(acked, version int64) bool { return acked == version || acked == 0 }

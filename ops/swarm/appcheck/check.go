// Package appcheck judges exactly once where it matters: in what the
// applications run, not in what their sidecars wrote. It holds the
// invariant "no job in two applications' hands at once" as a pure function
// over what the applications report (DoubleHeld), a consistent reader of
// their report files (ReadReports), and the application stand-in that
// writes such reports (StandIn): a process that reads its worker's jobs
// file as an application would, takes a set time to stop a job, and
// reports what it runs at every instant.
package appcheck

import (
	"errors"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
)

// Sample is what each application (a key per pod incarnation) reports it
// runs, read at one instant.
type Sample map[string][]string

// DoubleHeld is the violation of "no job in two applications' hands at
// once": each job of s that more than one application runs, with those
// applications, sorted. Empty when the invariant holds.
func DoubleHeld(s Sample) map[string][]string {
	on := map[string][]string{}
	for app, jobs := range s {
		for _, j := range jobs {
			on[j] = append(on[j], app)
		}
	}
	out := map[string][]string{}
	for j, apps := range on {
		if len(apps) > 1 {
			out[j] = slices.Sorted(slices.Values(apps))
		}
	}
	return out
}

// Running is every job of s, sorted, once per application running it.
func Running(s Sample) []string {
	var all []string
	for _, k := range slices.Sorted(maps.Keys(s)) {
		all = append(all, s[k]...)
	}
	slices.Sort(all)
	return all
}

// ReadReports reads the report file of each application (key to path) so
// that the contents held together at one instant: every file is read, then
// checked unchanged (the same inode: reports are replaced atomically) after
// all were read; a round that saw a file replaced is taken again. A missing
// file reports nothing running.
func ReadReports(paths map[string]string) Sample {
	for {
		out := Sample{}
		inodes := map[string]uint64{}
		for key, path := range paths {
			b, ino := readWithInode(path)
			inodes[key] = ino
			if jobs := strings.Fields(string(b)); len(jobs) > 0 {
				out[key] = jobs
			}
		}
		stable := true
		for key, path := range paths {
			if _, ino := readWithInode(path); ino != inodes[key] {
				stable = false
			}
		}
		if stable {
			return out
		}
	}
}

// readWithInode reads path and its inode (0 when missing; 1 when replaced
// while read, so the round is taken again).
func readWithInode(path string) ([]byte, uint64) {
	fh, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) || err != nil {
		return nil, 0
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, 0
	}
	b, _ := io.ReadAll(fh)
	if st2, err := os.Stat(path); err != nil || !os.SameFile(st, st2) {
		return nil, 1
	}
	return b, st.Sys().(*syscall.Stat_t).Ino
}

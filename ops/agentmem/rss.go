package agentmem

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Split is a process's resident memory in KiB, as /proc/PID/status and
// /proc/PID/smaps_rollup tell it: RSS = Anon (its own) + File (pages of
// files it maps, here the binary's, shared with every process mapping them)
// + Shmem. PSS divides each shared page among the processes mapping it.
type Split struct {
	RSS, Anon, File, Shmem int
	PSS, PSSAnon, PSSFile  int
}

// ReadSplit reads the Split of the process pid ("self" for this one).
func ReadSplit(pid string) (Split, error) {
	return readSplit(pid, "status", "smaps_rollup")
}

// ReadStatus reads the RSS part of the Split of the process pid (RSS,
// Anon, File, Shmem; no PSS) from /proc/PID/status alone. It is what a
// sampler that reads many processes often should use: the kernel builds
// smaps_rollup by walking the process's page tables under its mmap lock,
// about half a millisecond for an agent, where status costs a few
// microseconds.
func ReadStatus(pid string) (Split, error) {
	return readSplit(pid, "status")
}

func readSplit(pid string, files ...string) (Split, error) {
	var s Split
	for _, name := range files {
		f, err := os.Open(filepath.Join("/proc", pid, name))
		if err != nil {
			return s, fmt.Errorf("read the memory of process %s: %w", pid, err)
		}
		err = s.parse(f)
		f.Close()
		if err != nil {
			return s, fmt.Errorf("read the memory of process %s: %w", pid, err)
		}
	}
	return s, nil
}

// parse fills s from the "Key: value kB" lines of a status or smaps_rollup file.
func (s *Split) parse(r io.Reader) error {
	fields := map[string]*int{
		"VmRSS:": &s.RSS, "RssAnon:": &s.Anon, "RssFile:": &s.File, "RssShmem:": &s.Shmem,
		"Pss:": &s.PSS, "Pss_Anon:": &s.PSSAnon, "Pss_File:": &s.PSSFile,
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || fields[f[0]] == nil {
			continue
		}
		v, err := strconv.Atoi(f[1])
		if err != nil {
			return fmt.Errorf("%s %q: %w", f[0], f[1], err)
		}
		*fields[f[0]] = v
	}
	return sc.Err()
}

// String is the split in MiB.
func (s Split) String() string {
	mib := func(kb int) float64 { return float64(kb) / 1024 }
	return fmt.Sprintf("RSS %.1f MiB (anon %.1f, file %.1f), PSS %.1f MiB (anon %.1f, file %.1f)",
		mib(s.RSS), mib(s.Anon), mib(s.File), mib(s.PSS), mib(s.PSSAnon), mib(s.PSSFile))
}

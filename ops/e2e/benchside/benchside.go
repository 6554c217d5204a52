// Package benchside holds what the side-by-side rollout benchmark measures
// the same way for every contender (slipway's agents and controller in ops/e2e,
// system-upgrade-controller in ops/e2e/suc): the CPU seconds and resident
// memory of a set of processes read from /proc while a rollout runs, the
// load average, and one result line per run in a fixed key=value form that
// scripts/bench-suc parses to take medians over rounds.
package benchside

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"slipway.dev/slipway/ops/agentmem"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// ProcCPU returns the CPU time (user + system) the process has used so far.
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read the CPU time of process %d: %w", pid, err)
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line; the command name (field 2) may hold spaces, so the
// fields are counted after its closing parenthesis.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc stat %q: no command name", stat)
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc stat %q: %d fields after the command name, want at least 13", stat, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] { // utime, stime: fields 14 and 15 of the whole line
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc stat %q: %w", stat, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// ProcRSS returns the process's VmRSS and, of it, RssAnon, in KiB, from
// /proc/PID/status only (agentmem.ReadStatus): a Tracker reads every
// agent twice a second, and reading their smaps_rollup too (their PSS,
// which no Usage figure uses) cost 25 s of CPU in a 240 s staged rollout,
// taken from the processes under measurement.
func ProcRSS(pid int) (rss, anon int, err error) {
	m, err := agentmem.ReadStatus(strconv.Itoa(pid))
	return m.RSS, m.Anon, err
}

// Pids returns the ids of the running processes whose argv match.
func Pids(match func(argv []string) bool) []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || len(cmd) == 0 {
			continue
		}
		if !match(strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// LoadAverage is /proc/loadavg's first three fields.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// Median returns the middle value of v (the upper one of an even count), 0 for none.
func Median[T int | float64 | time.Duration](v []T) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// Tracker samples the CPU time and memory of the processes find returns,
// every interval, until Stop: a process that ends between two samples
// (an agent killed by a simulated reboot) counts with its last sample, so
// the CPU total may miss up to one interval of each ended process.
type Tracker struct {
	find     func() []int
	mu       sync.Mutex
	first    map[int]time.Duration // pid -> CPU at its first sample, for processes alive at the start
	last     map[int]time.Duration // pid -> CPU at its latest sample
	peakRSS  map[int]int           // pid -> largest VmRSS seen (KiB)
	peakAnon map[int]int
	stop     chan struct{}
	done     chan struct{}
}

// Track starts sampling the processes find returns.
func Track(find func() []int, interval time.Duration) *Tracker {
	t := &Tracker{find: find, first: map[int]time.Duration{}, last: map[int]time.Duration{},
		peakRSS: map[int]int{}, peakAnon: map[int]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	t.sample(true)
	go every(interval, t.stop, t.done, func() { t.sample(false) })
	return t
}

func (t *Tracker) sample(start bool) {
	pids := t.find()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, pid := range pids {
		cpu, err := ProcCPU(pid)
		if err != nil {
			continue
		}
		if _, seen := t.last[pid]; !seen && start {
			t.first[pid] = cpu
		}
		t.last[pid] = cpu
		if rss, anon, err := ProcRSS(pid); err == nil {
			t.peakRSS[pid], t.peakAnon[pid] = max(t.peakRSS[pid], rss), max(t.peakAnon[pid], anon)
		}
	}
}

// every calls sample every interval, and once more when stop closes;
// then it closes done.
func every(interval time.Duration, stop <-chan struct{}, done chan<- struct{}, sample func()) {
	defer close(done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			sample()
			return
		case <-tick.C:
			sample()
		}
	}
}

// Stop takes a last sample and ends the sampling.
func (t *Tracker) Stop() {
	close(t.stop)
	<-t.done
}

// Usage is what a Tracker saw.
type Usage struct {
	CPU       time.Duration // used by every tracked process between Track and Stop
	Processes int           // processes seen
	// PeakRSS and PeakAnon are the median over processes of each one's
	// largest VmRSS and RssAnon seen, in MiB; MaxRSS the largest of all.
	PeakRSS, PeakAnon, MaxRSS float64
}

// Usage sums what the tracker saw.
func (t *Tracker) Usage() Usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := Usage{Processes: len(t.last)}
	var rss, anon []int
	for pid, cpu := range t.last {
		u.CPU += cpu - t.first[pid]
		rss, anon = append(rss, t.peakRSS[pid]), append(anon, t.peakAnon[pid])
	}
	u.PeakRSS, u.PeakAnon = float64(Median(rss))/1024, float64(Median(anon))/1024
	if len(rss) > 0 {
		u.MaxRSS = float64(slices.Max(rss)) / 1024
	}
	return u
}

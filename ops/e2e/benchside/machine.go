package benchside

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The machine's CPU while a rollout runs. Every simulated node's agent,
// its slot's upgrade and its kubelet stand-in share this machine's cores
// with the control plane, where on a real fleet each node's share runs on
// that node. When several nodes take the same step at once, every core is
// busy for a while and each of their round trips waits its turn: a wall
// that moves with the seconds spent saturated is bound by the machine, not
// by the contender's waits. The sampler reads /proc/stat's "cpu" line
// (microseconds of work for the kernel, not a walk of any process).

// SaturatedAt is the share of the machine's CPU time busy in an interval
// from which the interval counts as saturated.
const SaturatedAt = 0.95

// MachineCPU is what the sampler saw: Busy the share of all cores' time
// spent busy over the whole, Saturated the time in intervals busy at
// SaturatedAt or more.
type MachineCPU struct {
	Busy      float64
	Saturated time.Duration
}

// cpuTimes are the aggregate "cpu" line's ticks: all of them, and the idle
// ones (idle and iowait); at is when they were read (zero in parseCPULine's
// result).
type cpuTimes struct {
	total, idle uint64
	at          time.Time
}

// parseCPULine reads /proc/stat's aggregate line ("cpu  user nice system
// idle iowait irq softirq steal ..."). Guest time is within user already.
func parseCPULine(line string) (cpuTimes, error) {
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("parse /proc/stat: %q is not the aggregate cpu line", line)
	}
	var t cpuTimes
	for i, s := range f[1:min(len(f), 9)] { // user nice system idle iowait irq softirq steal
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("parse /proc/stat field %d %q: %w", i+1, s, err)
		}
		t.total += n
		if i == 3 || i == 4 {
			t.idle += n
		}
	}
	return t, nil
}

// busyShare is the share of the ticks between a and b that were busy (0
// when none passed).
func busyShare(a, b cpuTimes) float64 {
	if b.total <= a.total {
		return 0
	}
	return 1 - float64(b.idle-a.idle)/float64(b.total-a.total)
}

// summarize folds samples into a MachineCPU. A saturated interval counts
// for the time between its two samples as read, not the sampler's
// nominal interval: on a saturated machine the sampler itself is late.
func summarize(samples []cpuTimes) MachineCPU {
	var m MachineCPU
	if len(samples) < 2 {
		return m
	}
	for i := 1; i < len(samples); i++ {
		if busyShare(samples[i-1], samples[i]) >= SaturatedAt {
			m.Saturated += samples[i].at.Sub(samples[i-1].at)
		}
	}
	m.Busy = busyShare(samples[0], samples[len(samples)-1])
	return m
}

// MachineSampler samples the machine's CPU every interval until Stop.
type MachineSampler struct {
	mu      sync.Mutex
	samples []cpuTimes
	stop    chan struct{}
	done    chan struct{}
}

// SampleMachine starts sampling /proc/stat every interval.
func SampleMachine(interval time.Duration) *MachineSampler {
	m := &MachineSampler{stop: make(chan struct{}), done: make(chan struct{})}
	m.sample()
	go every(interval, m.stop, m.done, m.sample)
	return m
}

func (m *MachineSampler) sample() {
	b, err := os.ReadFile("/proc/stat")
	at := time.Now()
	if err != nil {
		return
	}
	line, _, _ := strings.Cut(string(b), "\n")
	t, err := parseCPULine(line)
	if err != nil {
		return
	}
	t.at = at
	m.mu.Lock()
	m.samples = append(m.samples, t)
	m.mu.Unlock()
}

// Stop takes a last sample, ends the sampling and returns what it saw.
func (m *MachineSampler) Stop() MachineCPU {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return summarize(m.samples)
}

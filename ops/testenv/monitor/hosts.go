package monitor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/hostcheck"
)

// Host checks: with Config.Hosts set, the monitor also reads the simulated
// k3os hosts' files (ops/testenv/hostcheck: mixed-boot and
// staged-without-slot), which the API server cannot show, every
// Config.HostsEvery, with the nodes holding an UpdateChannel slot as the
// monitor last saw them. A node is checked once its directory under Hosts
// has a boots log (it booted as a k3os host); others (the update
// operator's, EDS's and swarm's nodes) are not.

// DefaultHostsEvery is how often the hosts' files are read by default.
const DefaultHostsEvery = time.Second

// hostChecks serialises the host checker's reads with its node set.
type hostChecks struct {
	root  string
	every time.Duration

	mu      sync.Mutex
	c       *hostcheck.Checker
	last    time.Time
	lastErr string
}

func newHostChecks(cfg Config) *hostChecks {
	if cfg.Hosts == "" {
		return nil
	}
	every := cfg.HostsEvery
	if every <= 0 {
		every = DefaultHostsEvery
	}
	c := hostcheck.New(cfg.Hosts, nil)
	c.Grace = cfg.HostsGrace
	return &hostChecks{root: cfg.Hosts, every: every, c: c}
}

// run checks the hosts at now if a check is due (quiet: always, with no
// grace), first adding the nodes booted since the last check. It returns
// the findings new at this check and an error not returned before (a host
// read as it is written fails once, not at every check).
func (h *hostChecks) run(now time.Time, slots map[string]bool, quiet bool) ([]hostcheck.Finding, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !quiet && !h.last.IsZero() && now.Sub(h.last) < h.every {
		return nil, nil
	}
	h.last = now
	entries, err := os.ReadDir(h.root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, h.once(fmt.Errorf("read the nodes' root %s: %w", h.root, err))
	}
	for _, e := range entries {
		if _, known := h.c.Nodes[e.Name()]; known || !e.IsDir() {
			continue
		}
		dir := filepath.Join(h.root, e.Name())
		if _, err := os.Stat(filepath.Join(dir, testenv.BootsLog)); err == nil {
			h.c.Nodes[e.Name()] = dir
		}
	}
	var fs []hostcheck.Finding
	if quiet {
		fs, err = h.c.Quiet(now)
	} else {
		fs, err = h.c.Check(now, slots)
	}
	if err != nil {
		return fs, h.once(err)
	}
	return fs, nil
}

func (h *hostChecks) once(err error) error {
	if err.Error() == h.lastErr {
		return nil
	}
	h.lastErr = err.Error()
	return err
}

// checkHosts runs the host checks if due and records their findings as
// violations, with the history of the Node each names. Called without m.mu.
func (m *Monitor) checkHosts(quiet bool) {
	if m.hosts == nil {
		return
	}
	now := m.cfg.Now()
	m.mu.Lock()
	slots := map[string]bool{}
	for _, ch := range m.channels {
		for _, n := range ch.Slots {
			slots[n] = true
		}
	}
	m.mu.Unlock()
	fs, err := m.hosts.run(now, slots, quiet)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.errs = append(m.errs, fmt.Errorf("host checks: %w", err))
	}
	for _, f := range fs {
		node := "Node//" + f.Node
		m.violations = append(m.violations, Violation{At: f.At, Invariant: f.Invariant, Key: f.Key, Message: f.Message,
			History: map[string][]Version{node: slices.Clone(m.history[node])}})
	}
}

// HostChecks is how many times the hosts' files were checked (0: no
// Config.Hosts).
func (m *Monitor) HostChecks() int {
	if m.hosts == nil {
		return 0
	}
	return m.hosts.c.Checks()
}

// Package hostcheck checks invariants of the simulated k3os hosts' files,
// which the API server cannot show: what each node booted (the boots log
// its boot writes, testenv.K3osNode with Loader) and what it would boot
// next (its system directory's `current` links, a swap journal finished as
// the loader would). Two invariants:
//
//   - mixed-boot: no node boots a rootfs, kernel and k3s of different
//     releases (by the release markers of the folders it booted);
//   - staged-without-slot: a node that holds no slot has nothing activated
//     it does not run: what it would boot next is what it booted. A slot
//     that ends other than Complete (a deferral, a failure, a slot taken
//     away) must leave the node's next boot as it was, or the next
//     unplanned reboot boots the new release with no drain, slot or window.
//     The agent may take a grace to undo an activation, but the grace ends
//     at the node's own next boot: a node seen without a slot with
//     something activated, that then boots other than what it ran while
//     still holding no slot, is a violation at once (BootedStaged).
//
// A Checker reads the hosts' files at each Check (a few small files per
// node) and keeps what it reported; Quiet is the last word once a run has
// settled. The monitor, or a chaos run, calls them with the nodes holding
// slots now.
package hostcheck

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
)

// The invariants' names.
const (
	InvMixedBoot         = "mixed-boot"
	InvStagedWithoutSlot = "staged-without-slot"
)

// DefaultGrace is how long a node without a slot may have a next boot other
// than the one it runs before staged-without-slot reports it: the agent
// ends a slot, then undoes what it activated with a rollback Job.
const DefaultGrace = 90 * time.Second

// Finding is one violation.
type Finding struct {
	At        time.Time
	Invariant string
	// Node is the node; Key is stable while the violation stands (the
	// node and, for mixed-boot, its boot).
	Node, Key string
	Message   string
}

func (f Finding) String() string {
	return fmt.Sprintf("%s %s %s: %s", f.At.Format("15:04:05.000"), f.Invariant, f.Key, f.Message)
}

// Versions are a boot's folders: k3os/<Rootfs>, kernel/<Kernel>,
// k3s/<K3s> (K3s empty: none).
type Versions struct {
	Rootfs, Kernel, K3s string
}

func (v Versions) String() string {
	s := "rootfs " + v.Rootfs + " kernel " + v.Kernel
	if v.K3s != "" {
		s += " k3s " + v.K3s
	}
	return s
}

// Boot is one line of a node's boots log.
type Boot struct {
	N string // the node's boot count
	Versions
}

// Host is what one node's files say.
type Host struct {
	Node string
	// Boots are every boot logged, oldest first.
	Boots []Boot
	// Next is what the loader would boot now: the `current` links, with a
	// pending swap journal applied.
	Next Versions
}

// Booted is the last boot (false: none logged yet).
func (h Host) Booted() (Boot, bool) {
	if len(h.Boots) == 0 {
		return Boot{}, false
	}
	return h.Boots[len(h.Boots)-1], true
}

// ReadHost reads the host files of node in dir (the node's directory: its
// system directory is testenv.K3osSystemDir, its log testenv.BootsLog).
func ReadHost(node, dir string) (Host, error) {
	h := Host{Node: node}
	f, err := os.Open(filepath.Join(dir, testenv.BootsLog))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return h, fmt.Errorf("read %s's boots log: %w", node, err)
	}
	if err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if b, ok := parseBoot(sc.Text()); ok {
				h.Boots = append(h.Boots, b)
			}
		}
		f.Close()
	}
	l := layout.New(filepath.Join(dir, testenv.K3osSystemDir))
	pending, err := l.PendingSwap()
	if err != nil {
		return h, fmt.Errorf("%s: %w", node, err)
	}
	for _, x := range []struct {
		c   layout.Component
		dst *string
	}{{layout.Rootfs, &h.Next.Rootfs}, {layout.Kernel, &h.Next.Kernel}, {layout.K3s, &h.Next.K3s}} {
		v, err := l.Current(x.c)
		if err != nil {
			return h, fmt.Errorf("%s: read %s/current: %w", node, x.c, err)
		}
		for _, ch := range pending {
			if ch.Component == x.c && ch.Link == layout.CurrentLink {
				v = ch.Version
			}
		}
		*x.dst = v
	}
	return h, nil
}

// parseBoot reads "<boot> rootfs=<v> kernel=<v> k3s=<v>".
func parseBoot(line string) (Boot, bool) {
	w := strings.Fields(line)
	if len(w) < 3 {
		return Boot{}, false
	}
	b := Boot{N: w[0]}
	for _, kv := range w[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "rootfs":
			b.Rootfs = v
		case "kernel":
			b.Kernel = v
		case "k3s":
			b.K3s = v
		}
	}
	return b, b.Rootfs != "" && b.Kernel != ""
}

// Releases maps each folder of a boot to its release (its marker's;
// "" when it has none, e.g. installed by k3os).
func Releases(systemDir string, v Versions) map[layout.Component]string {
	l := layout.New(systemDir)
	out := map[layout.Component]string{}
	for _, x := range []struct {
		c layout.Component
		v string
	}{{layout.Rootfs, v.Rootfs}, {layout.Kernel, v.Kernel}, {layout.K3s, v.K3s}} {
		if x.v == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(l.VersionDir(x.c, x.v), upgrade.MarkerFile))
		if err != nil {
			out[x.c] = ""
			continue
		}
		var m upgrade.Marker
		if json.Unmarshal(b, &m) != nil {
			out[x.c] = ""
			continue
		}
		out[x.c] = m.Release
	}
	return out
}

// Mixed says why a boot's folders are of different releases ("": one
// release, or a folder without a marker, which says nothing).
func Mixed(rel map[layout.Component]string) string {
	var seen []string
	for _, c := range []layout.Component{layout.Rootfs, layout.Kernel, layout.K3s} {
		if r := rel[c]; r != "" && !slices.Contains(seen, r) {
			seen = append(seen, r)
		}
	}
	if len(seen) < 2 {
		return ""
	}
	var parts []string
	for _, c := range []layout.Component{layout.Rootfs, layout.Kernel, layout.K3s} {
		if r, ok := rel[c]; ok {
			parts = append(parts, fmt.Sprintf("%s of %s", compName[c], orNone(r)))
		}
	}
	return strings.Join(parts, ", ")
}

// compName names a component as the boots log does.
var compName = map[layout.Component]string{layout.Rootfs: "rootfs", layout.Kernel: "kernel", layout.K3s: "k3s"}

func orNone(s string) string {
	if s == "" {
		return "(no marker)"
	}
	return s
}

// Checker checks the invariants over a set of hosts.
type Checker struct {
	// Nodes maps each node to its directory.
	Nodes map[string]string
	// Grace is how long staged-without-slot lets a node without a slot
	// differ (default DefaultGrace).
	Grace time.Duration

	mu       sync.Mutex
	reported map[string]bool       // keys reported
	since    map[string]stagedSeen // node: since when it differs without a slot, and what it ran then
	found    []Finding
	checks   int
}

// stagedSeen is a node first seen without a slot with a next boot other
// than the one it runs: when, the boot it ran and what it would boot.
type stagedSeen struct {
	At   time.Time
	Ran  Boot
	Next Versions
}

// BootedStaged reports whether a node that ran boot ran, with something
// activated and no slot, booted other than what it ran by its next boot
// now (a boot of another count): its own reboot (a panic, a power loss)
// booted the activated release with no drain, slot or window. A boot of
// what it ran (the activation undone, or a rollback the loader finished)
// is not.
func BootedStaged(ran, now Boot) bool {
	return now.N != ran.N && now.Versions != ran.Versions
}

// New is a Checker of nodes whose directories are <nodesRoot>/<node> (a
// simulated cluster's testenv.Env.NodesRoot).
func New(nodesRoot string, nodes []string) *Checker {
	c := &Checker{Nodes: map[string]string{}}
	for _, n := range nodes {
		c.Nodes[n] = filepath.Join(nodesRoot, n)
	}
	return c
}

// Check reads every host and checks both invariants at now; slots are the
// nodes holding a slot now. It returns the findings new at this check
// (each violation is reported once per key), and the hosts it could not
// read.
func (c *Checker) Check(now time.Time, slots map[string]bool) ([]Finding, error) {
	return c.check(now, slots, false)
}

// Quiet checks once a run has settled (no slot held anywhere): every node's
// next boot must be what it runs, with no grace.
func (c *Checker) Quiet(now time.Time) ([]Finding, error) {
	return c.check(now, nil, true)
}

func (c *Checker) check(now time.Time, slots map[string]bool, quiet bool) ([]Finding, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reported == nil {
		c.reported, c.since = map[string]bool{}, map[string]stagedSeen{}
	}
	grace := c.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	c.checks++
	var out []Finding
	var errs []error
	add := func(f Finding) {
		if !c.reported[f.Key] {
			c.reported[f.Key] = true
			out = append(out, f)
		}
	}
	nodes := make([]string, 0, len(c.Nodes))
	for n := range c.Nodes {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, node := range nodes {
		dir := c.Nodes[node]
		h, err := ReadHost(node, dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sys := filepath.Join(dir, testenv.K3osSystemDir)
		for _, b := range h.Boots {
			if why := Mixed(Releases(sys, b.Versions)); why != "" {
				add(Finding{At: now, Invariant: InvMixedBoot, Node: node, Key: node + "/boot-" + b.N,
					Message: fmt.Sprintf("node %s booted %s (boot %s): %s", node, b.Versions, b.N, why)})
			}
		}
		booted, ok := h.Booted()
		if !ok {
			continue
		}
		if slots[node] {
			delete(c.since, node)
			continue
		}
		if seen, ok := c.since[node]; ok && seen.Ran.N != booted.N {
			// The grace ends at the node's own boot.
			if BootedStaged(seen.Ran, booted) {
				add(Finding{At: now, Invariant: InvStagedWithoutSlot, Node: node, Key: node + "/boot-" + booted.N,
					Message: fmt.Sprintf("node %s booted %s (boot %s) holding no slot, over %s it ran (boot %s): %s was activated without a slot since %s, %s before",
						node, booted.Versions, booted.N, seen.Ran.Versions, seen.Ran.N, seen.Next, seen.At.Format("15:04:05.000"), now.Sub(seen.At).Round(time.Second))})
			}
			delete(c.since, node)
		}
		if h.Next == booted.Versions {
			delete(c.since, node)
			continue
		}
		seen, ok := c.since[node]
		if !ok {
			seen = stagedSeen{At: now, Ran: booted, Next: h.Next}
			c.since[node] = seen
		}
		if quiet || now.Sub(seen.At) >= grace {
			add(Finding{At: now, Invariant: InvStagedWithoutSlot, Node: node, Key: node + "/next-" + h.Next.String(),
				Message: fmt.Sprintf("node %s holds no slot (for %s) but would boot %s, not %s it runs (boot %s)",
					node, now.Sub(seen.At).Round(time.Second), h.Next, booted.Versions, booted.N)})
		}
	}
	c.found = append(c.found, out...)
	return out, errors.Join(errs...)
}

// Findings are every violation reported so far.
func (c *Checker) Findings() []Finding {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.found)
}

// Checks is how many times the hosts were checked.
func (c *Checker) Checks() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checks
}

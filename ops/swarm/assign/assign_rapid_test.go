package assign

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// poolMachine changes a pool (workers join and leave, jobs are added and
// removed, jobs become dedicated) and reassigns after each change from the
// assignment in force, checking every result: no job in two hands, every
// job placed while there are workers, a dedicated job alone on its worker,
// and Moved counting exactly the jobs that changed hands.
type poolMachine struct {
	workers, jobs, dedicated []string
	prev                     map[string][]string
	seq                      int
}

func (m *poolMachine) name(prefix string) string {
	m.seq++
	return fmt.Sprintf("%s%d", prefix, m.seq)
}

func (m *poolMachine) AddWorker(t *rapid.T) { m.workers = append(m.workers, m.name("w")) }
func (m *poolMachine) AddJob(t *rapid.T)    { m.jobs = append(m.jobs, m.name("j")) }

func (m *poolMachine) RemoveWorker(t *rapid.T) {
	if len(m.workers) == 0 {
		t.Skip("no worker")
	}
	i := rapid.IntRange(0, len(m.workers)-1).Draw(t, "worker")
	m.workers = slices.Delete(m.workers, i, i+1)
}

func (m *poolMachine) RemoveJob(t *rapid.T) {
	if len(m.jobs) == 0 {
		t.Skip("no job")
	}
	i := rapid.IntRange(0, len(m.jobs)-1).Draw(t, "job")
	j := m.jobs[i]
	m.jobs = slices.Delete(m.jobs, i, i+1)
	m.dedicated = slices.DeleteFunc(m.dedicated, func(d string) bool { return d == j })
}

func (m *poolMachine) Dedicate(t *rapid.T) {
	if len(m.jobs) == 0 {
		t.Skip("no job")
	}
	j := rapid.SampledFrom(m.jobs).Draw(t, "dedicate")
	if !slices.Contains(m.dedicated, j) {
		m.dedicated = append(m.dedicated, j)
	}
}

// Assign reassigns from the assignment in force.
func (m *poolMachine) Assign(t *rapid.T) {
	in := Input{Jobs: slices.Clone(m.jobs), Workers: slices.Clone(m.workers), Previous: m.prev, Dedicated: slices.Clone(m.dedicated)}
	res, err := Assign(in)
	var ae *Error
	d, w := len(m.dedicated), len(m.workers)
	if w > 0 && (d > w || d == w && len(m.jobs) > d) { // the dedicated jobs leave no worker for the rest
		if err == nil {
			t.Fatalf("%d dedicated of %d jobs on %d workers assigned: %v", d, len(m.jobs), w, res.Assignments)
		}
		if !errors.As(err, &ae) {
			t.Fatalf("%d dedicated jobs on %d workers: %v, want an *Error", d, w, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Assign(%+v): %v", in, err)
	}
	holder := map[string]string{}
	for w, js := range res.Assignments {
		if !slices.Contains(m.workers, w) {
			t.Fatalf("jobs given to %s, not a worker", w)
		}
		for _, j := range js {
			if h, ok := holder[j]; ok {
				t.Fatalf("job %s in two hands: %s and %s", j, h, w)
			}
			holder[j] = w
			if slices.Contains(m.dedicated, j) && len(js) != 1 {
				t.Fatalf("dedicated job %s shares %s with %v", j, w, js)
			}
		}
	}
	if len(m.workers) > 0 && len(holder) != len(m.jobs) {
		t.Fatalf("%d of %d jobs placed on %d workers; unassigned %v", len(holder), len(m.jobs), len(m.workers), res.Unassigned)
	}
	moved := 0
	for w, js := range m.prev {
		for _, j := range js {
			if h, ok := holder[j]; ok && h != w {
				moved++
			}
		}
	}
	if len(m.workers) > 0 && res.Moved < moved {
		t.Fatalf("Moved %d, but %d jobs changed hands", res.Moved, moved)
	}
	m.prev = res.Assignments
}

func (m *poolMachine) Check(*rapid.T) {}

// TestAssignRapid runs pools through random changes and reassignments.
func TestAssignRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		t.Repeat(rapid.StateMachineActions(&poolMachine{}))
	})
}

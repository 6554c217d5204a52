// Package config is the format shared by the swarm controller and its
// workers: the workers' ConfigMap (key config.yml), which keeps the format of
// the proof of concept it replaces,
//
//	version: 7
//	workloads:
//	  swarm-worker-0: {jobs: [cam-1, cam-4], version: 7}
//	  swarm-worker-1: {jobs: [cam-2, cam-3], version: 5}
//
// where a worker's version is the assignment version at which its job set
// last changed, and the job list a Swarm reads from a ConfigMap key.
//
// A share may also list `releasing` jobs: jobs taken from that worker that
// it has not yet confirmed stopped (by reporting its share's version). The
// worker runs only `jobs`; the controller gives a releasing job to no one
// else until it is released, so no job ever runs on two workers.
package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Config is the content of the workers' ConfigMap.
type Config struct {
	// Version of the assignment; it grows with every change.
	Version int64 `json:"version"`
	// Workloads maps a worker's pod name to its share.
	Workloads map[string]Workload `json:"workloads"`
}

// Workload is one worker's share.
type Workload struct {
	Jobs []string `json:"jobs"`
	// Version is the assignment version at which this job set was given.
	Version int64 `json:"version"`
	// Releasing are the jobs revoked from this worker that it has not yet
	// confirmed stopped; no other worker is given them meanwhile. The
	// worker itself ignores them.
	Releasing []string `json:"releasing,omitempty"`
}

// Parse reads config.yml. Empty text is an empty Config.
func Parse(text string) (Config, error) {
	var c Config
	if strings.TrimSpace(text) == "" {
		return Config{Workloads: map[string]Workload{}}, nil
	}
	if err := yaml.UnmarshalStrict([]byte(text), &c); err != nil {
		return Config{}, fmt.Errorf("parse the workers' config.yml: %w", err)
	}
	if c.Workloads == nil {
		c.Workloads = map[string]Workload{}
	}
	return c, nil
}

// Render writes c as config.yml, workers and jobs sorted.
func (c Config) Render() (string, error) {
	if c.Workloads == nil {
		c.Workloads = map[string]Workload{}
	}
	for k, w := range c.Workloads {
		if w.Jobs == nil {
			w.Jobs = []string{}
		}
		c.Workloads[k] = w
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("render the workers' config.yml: %w", err)
	}
	return string(b), nil
}

// Assignments is the worker-to-jobs map of c (what each worker is to run).
func (c Config) Assignments() map[string][]string {
	out := make(map[string][]string, len(c.Workloads))
	for w, wl := range c.Workloads {
		out[w] = wl.Jobs
	}
	return out
}

// Owners is the worker-to-jobs map of c counting the releasing jobs as
// their old worker's: the previous assignment for the next computation, so
// a handover in progress computes the same target again.
func (c Config) Owners() map[string][]string {
	out := make(map[string][]string, len(c.Workloads))
	for w, wl := range c.Workloads {
		out[w] = append(slices.Clone(wl.Jobs), wl.Releasing...)
	}
	return out
}

// Equal tells whether c and o hold the same version and shares.
func (c Config) Equal(o Config) bool {
	if c.Version != o.Version || len(c.Workloads) != len(o.Workloads) {
		return false
	}
	for _, k := range slices.Sorted(maps.Keys(c.Workloads)) {
		a := c.Workloads[k]
		if b, ok := o.Workloads[k]; !ok || a.Version != b.Version || !SameJobs(a.Jobs, b.Jobs) || !SameJobs(a.Releasing, b.Releasing) {
			return false
		}
	}
	return true
}

// SameJobs tells whether a and b hold the same jobs, in any order.
func SameJobs(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	as, bs := slices.Clone(a), slices.Clone(b)
	slices.Sort(as)
	slices.Sort(bs)
	return slices.Equal(as, bs)
}

// ParseJobs reads a job list: a YAML list (`- a` lines or `[a, b]`), or one
// job per line, blank lines and lines starting with # skipped. Names are
// trimmed; order and repeats are kept for the caller to judge.
func ParseJobs(text string) ([]string, error) {
	first := ""
	for _, line := range strings.Split(text, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			first = l
			break
		}
	}
	if strings.HasPrefix(first, "- ") || first == "-" || strings.HasPrefix(first, "[") {
		var jobs []string
		if err := yaml.UnmarshalStrict([]byte(text), &jobs); err != nil {
			return nil, fmt.Errorf("the job list looks like a YAML list but is not a list of names: %w", err)
		}
		for i := range jobs {
			jobs[i] = strings.TrimSpace(jobs[i])
		}
		return jobs, nil
	}
	var jobs []string
	for _, line := range strings.Split(text, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			jobs = append(jobs, l)
		}
	}
	return jobs, nil
}

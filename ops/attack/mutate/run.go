package mutate

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
)

// Outcome is how the API server answered one mutation.
type Outcome int

// The outcomes, from the safest.
const (
	Refused  Outcome = iota // Forbidden: RBAC or an admission policy
	Invalid                 // refused by the API's own validation (or a bad request)
	NoEffect                // admitted; stored as the unmutated write is
	ByDesign                // admitted; the path is a hole
	Wrong                   // admitted; not a hole: a gap
)

func (o Outcome) String() string {
	return [...]string{"refused", "invalid", "no effect", "allowed by design", "allowed and wrong"}[o]
}

// Target is one object a component writes, and how to attack it.
type Target struct {
	// Component and Object name it in the report ("ops agent", "upgrade Job").
	Component, Object string
	// Base is the object the component really writes (a pointer).
	Base any
	// Holes are the paths it legitimately varies.
	Holes Holes
	// Options steer the walk.
	Options Options
	// Submit writes obj with the component's own token, as a dry run, and
	// returns what the server would store.
	Submit func(ctx context.Context, obj any) (any, error)
	// Normalize removes, from a stored object as unstructured, what differs
	// between two writes of the same object (generated names, UIDs).
	Normalize func(map[string]any)
}

// Result is one mutation's answer.
type Result struct {
	Mutation
	Outcome Outcome
	Err     error
	// Differs says, for an admitted mutation, where the stored object
	// differs from the unmutated write's.
	Differs []string
}

// Report counts a target's answers.
type Report struct {
	Target  *Target
	Results []Result
}

// Count is how many results had outcome o.
func (r Report) Count(o Outcome) int {
	n := 0
	for _, res := range r.Results {
		if res.Outcome == o {
			n++
		}
	}
	return n
}

// Wrong are the mutations admitted that no hole allows.
func (r Report) Wrong() []Result {
	var out []Result
	for _, res := range r.Results {
		if res.Outcome == Wrong {
			out = append(out, res)
		}
	}
	return out
}

// String is the report's line: tried, refused (policy or RBAC, and the
// API's validation), no effect, allowed by design, allowed and wrong.
func (r Report) String() string {
	return fmt.Sprintf("%s, %s: tried %d, refused %d (+%d invalid), no effect %d, allowed by design %d, allowed and wrong %d",
		r.Target.Component, r.Target.Object, len(r.Results), r.Count(Refused), r.Count(Invalid), r.Count(NoEffect), r.Count(ByDesign), r.Count(Wrong))
}

// Run submits every mutation of t.Base (parallel at once) and sorts the
// answers. The unmutated object must be admitted.
func Run(ctx context.Context, t Target, parallel int) (Report, error) {
	base, err := t.Submit(ctx, t.Base)
	if err != nil {
		return Report{}, fmt.Errorf("%s %s: the unmutated object is refused: %w", t.Component, t.Object, err)
	}
	want, err := t.stored(base)
	if err != nil {
		return Report{}, err
	}
	muts := Generate(t.Base, t.Options)
	results := make([]Result, len(muts))
	var wg sync.WaitGroup
	next := make(chan int)
	for range max(parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = t.classify(ctx, muts[i], want)
			}
		}()
	}
	for i := range muts {
		next <- i
	}
	close(next)
	wg.Wait()
	sort.SliceStable(results, func(i, j int) bool { return results[i].Path < results[j].Path })
	return Report{Target: &t, Results: results}, ctx.Err()
}

func (t Target) classify(ctx context.Context, m Mutation, want map[string]any) Result {
	got, err := t.Submit(ctx, m.Object)
	r := Result{Mutation: m, Err: err}
	switch {
	case apierrors.IsForbidden(err) || err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
		r.Outcome = Refused // RBAC, or a policy's denial (422 with its message)
	case err != nil:
		r.Outcome = Invalid
	default:
		stored, serr := t.stored(got)
		switch {
		case serr == nil && reflect.DeepEqual(stored, want):
			r.Outcome = NoEffect
		case t.Holes.Match(m.Path):
			r.Outcome = ByDesign
		default:
			r.Outcome, r.Differs = Wrong, Diff(want, stored)
		}
	}
	return r
}

// stored is obj as unstructured, without what differs between two writes.
func (t Target) stored(obj any) (map[string]any, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	if md, ok := u["metadata"].(map[string]any); ok {
		for _, k := range []string{"uid", "creationTimestamp", "managedFields", "resourceVersion", "generation"} {
			delete(md, k)
		}
	}
	if t.Normalize != nil {
		t.Normalize(u)
	}
	return u, nil
}

// Summary lines up reports by component: tried, refused, allowed by design.
func Summary(reports []Report) string {
	type sum struct{ tried, refused, invalid, none, design, wrong int }
	by := map[string]*sum{}
	var names []string
	for _, r := range reports {
		s := by[r.Target.Component]
		if s == nil {
			s = &sum{}
			by[r.Target.Component] = s
			names = append(names, r.Target.Component)
		}
		s.tried += len(r.Results)
		s.refused += r.Count(Refused)
		s.invalid += r.Count(Invalid)
		s.none += r.Count(NoEffect)
		s.design += r.Count(ByDesign)
		s.wrong += r.Count(Wrong)
	}
	var b strings.Builder
	fmt.Fprintln(&b, "| component | tried | refused (policy, RBAC) | invalid (API validation) | no effect | allowed by design | allowed and wrong |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|")
	for _, n := range names {
		s := by[n]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d |\n", n, s.tried, s.refused, s.invalid, s.none, s.design, s.wrong)
	}
	return b.String()
}

// Diff is where two stored objects differ (for a report's reader).
func Diff(a, b map[string]any) []string {
	var out []string
	var walk func(p string, x, y any)
	walk = func(p string, x, y any) {
		mx, okx := x.(map[string]any)
		my, oky := y.(map[string]any)
		if okx && oky {
			for k := range mx {
				walk(p+"."+k, mx[k], my[k])
			}
			for k := range my {
				if _, ok := mx[k]; !ok {
					walk(p+"."+k, nil, my[k])
				}
			}
			return
		}
		if !reflect.DeepEqual(x, y) {
			out = append(out, fmt.Sprintf("%s: %v != %v", p, x, y))
		}
	}
	walk("", a, b)
	return out
}

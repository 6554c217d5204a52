package conflict

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestRetry(t *testing.T) {
	conflictErr := apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "n", errors.New("changed"))
	for _, c := range []struct {
		name  string
		errs  []error // fn's answers, one a call
		want  error
		calls int
	}{
		{"made at once", []error{nil}, nil, 1},
		{"made after a conflict", []error{conflictErr, nil}, nil, 2},
		{"the context ended: not made", []error{fmt.Errorf("patch: %w", context.Canceled)}, context.Canceled, 1},
		{"past its deadline: not made", []error{fmt.Errorf("patch: %w", context.DeadlineExceeded)}, context.DeadlineExceeded, 1},
		{"ended after a conflict", []error{conflictErr, context.Canceled}, context.Canceled, 2},
	} {
		calls := 0
		err := Retry(func() error { calls++; return c.errs[min(calls, len(c.errs))-1] })
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) || calls != c.calls {
			t.Errorf("%s: Retry = %v after %d calls, want %v after %d", c.name, err, calls, c.want, c.calls)
		}
	}
}

package answer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestUnanswered(t *testing.T) {
	nodes := schema.GroupResource{Resource: "nodes"}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"no error", nil, false},
		{"a handler timeout (504)", apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0), true},
		{"etcd timed out (500 with reason Timeout)", apierrors.NewServerTimeout(nodes, "get", 1), true},
		{"too many requests (429)", apierrors.NewTooManyRequests("busy", 1), true},
		{"a request timeout (408)", apierrors.NewGenericServerResponse(408, "get", nodes, "n", "", 0, false), true},
		{"service unavailable (503)", apierrors.NewServiceUnavailable("starting"), true},
		{"an internal error (500)", apierrors.NewInternalError(errors.New("etcd")), true},
		{"wrapped with context", fmt.Errorf("read node n before its drain: %w", apierrors.NewTooManyRequests("busy", 1)), true},
		{"connection refused", &url.Error{Op: "Get", URL: "https://api/nodes/n", Err: syscall.ECONNREFUSED}, true},
		{"the client's own timeout", fmt.Errorf("read: %w", context.DeadlineExceeded), true},
		{"the answer cut short", io.ErrUnexpectedEOF, true},
		{"forbidden: an answer", apierrors.NewForbidden(nodes, "n", errors.New("RBAC")), false},
		{"the node gone: an answer", apierrors.NewNotFound(nodes, "n"), false},
		{"this process stopping", fmt.Errorf("read: %w", context.Canceled), false},
		{"not an answer of the API server", errors.New("decode: bad json"), false},
	} {
		if got := Unanswered(c.err); got != c.want {
			t.Errorf("%s: Unanswered(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

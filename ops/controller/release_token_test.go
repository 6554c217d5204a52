package controller

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// TestTokenReadError: a token Secret that is not there is told how to
// make; one the controller may not read, how to name it; a read without
// an answer gets neither (the Secret may well be there), and every one
// keeps the error it came with.
func TestTokenReadError(t *testing.T) {
	secrets := schema.GroupResource{Resource: "secrets"}
	ref := &v1.SecretKeyRef{Name: "gh"}
	for _, c := range []struct {
		name    string
		err     error
		says    string
		mustNot string
	}{
		{"not there", apierrors.NewNotFound(secrets, "gh"), "create it: kubectl -n ns create secret generic gh", "--token-secret"},
		{"forbidden", apierrors.NewForbidden(secrets, "gh", errors.New("RBAC")), "--token-secret gh", "create it"},
		{"no answer (504)", apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0), "read the token Secret gh", "create it"},
		{"too many requests", apierrors.NewTooManyRequests("busy", 1), "read the token Secret gh", "create it"},
	} {
		err := tokenReadError("ns", "default", ref, c.err)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: %v does not wrap %v", c.name, err, c.err)
		}
		if !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), c.mustNot) {
			t.Errorf("%s: %q; want it to say %q and not %q", c.name, err, c.says, c.mustNot)
		}
	}
}

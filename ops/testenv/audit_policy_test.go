package testenv

import (
	"strings"
	"testing"
)

func TestPolicyWithGets(t *testing.T) {
	got, err := policyWithGets([]AuditGets{
		{Resources: []string{"nodes"}},
		{Group: "ops.slipway.dev", Resources: []string{"nodeupdates"}, UserGroups: []string{"system:serviceaccounts"}},
		{Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"- level: Metadata\n  verbs: [create, update, patch, delete, deletecollection]\n",
		"- level: Metadata\n  verbs: [\"get\",\"list\"]\n  resources: [{group: \"\", resources: [\"nodes\"]}]\n",
		"  resources: [{group: \"ops.slipway.dev\", resources: [\"nodeupdates\"]}]\n  userGroups: [\"system:serviceaccounts\"]\n",
		"- level: Metadata\n  verbs: [\"list\",\"watch\"]\n  resources: [{group: \"\", resources: [\"nodes\"]}]\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the policy lacks %q:\n%s", want, got)
		}
	}
	if !strings.HasSuffix(got, "- level: None\n") {
		t.Errorf("the policy does not end with the rule that drops the rest:\n%s", got)
	}
	if _, err := policyWithGets([]AuditGets{{Group: "apps"}}); err == nil {
		t.Error("a rule naming no resource was taken")
	}
}

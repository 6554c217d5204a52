package mutate

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGenerateWalksEveryField(t *testing.T) {
	base := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Labels: map[string]string{"a": "b"}}, Data: map[string]string{"k": "v"}}
	muts := Generate(base, Options{KeyPrefixes: []string{"ops.slipway.dev/"}})
	seen := map[string]bool{}
	for _, m := range muts {
		seen[m.What+" "+m.Path] = true
		if m.Object == any(base) {
			t.Fatal("a mutation changed the base object itself")
		}
	}
	for _, want := range []string{"change metadata.name", "remove metadata.labels[a]", "change metadata.labels[a]", "add metadata.labels[ops.slipway.dev/mutated]",
		"add metadata.annotations[mutated.example.com/k]", "add metadata.finalizers[+]", "add metadata.ownerReferences[+]", "set metadata.namespace",
		"change data[k]", "set immutable"} {
		if !seen[want] {
			t.Errorf("no mutation %q among %d", want, len(muts))
		}
	}
	if base.Name != "c" || len(base.Labels) != 1 || base.Annotations != nil {
		t.Errorf("the base changed: %+v", base.ObjectMeta)
	}
	if seen["change metadata.uid"] || seen["set metadata.uid"] {
		t.Error("metadata.uid is the server's: DefaultSkip leaves it")
	}
}

func TestHoles(t *testing.T) {
	h := Holes{"metadata.annotations[ops.slipway.dev/*]", "spec.containers[0].args[3]"}
	for path, want := range map[string]bool{
		"metadata.annotations[ops.slipway.dev/version]": true, "metadata.annotations[example.com/x]": false,
		"spec.containers[0].args[3]": true, "spec.containers[0].args[4]": false, "spec.containers[0].args[31]": false,
	} {
		if got := h.Match(path); got != want {
			t.Errorf("Match(%q) = %v, want %v", path, got, want)
		}
	}
	if !slices.Contains([]string{Refused.String(), Wrong.String()}, "allowed and wrong") {
		t.Error("outcome names")
	}
}

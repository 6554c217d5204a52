package agent

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"v1.30.2+k3s1":     "v1.30.2-k3s1",
		"v0.2.0":           "v0.2.0",
		"+weird+":          "weird",
		"5.15.0-1-generic": "5.15.0-1-generic",
	} {
		if got := LabelValue(in); got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
	}
	long := strings.Repeat("v1.2.3+", 20)
	for _, s := range []string{long, long + "x"} {
		if errs := validation.IsValidLabelValue(LabelValue(s)); len(errs) > 0 {
			t.Errorf("LabelValue(%q) is invalid: %v", s, errs)
		}
	}
	if LabelValue(long) == LabelValue(long+"x") {
		t.Error("long values must keep a hash of the whole")
	}
}

func TestJobName(t *testing.T) {
	names := map[string]bool{}
	for _, tc := range []struct {
		node, version string
		attempt       int
	}{
		{"node-1", "v1.2.3+k3s1", 1}, {"node-1", "v1.2.3+k3s1", 2}, {"node-10", "v1.2.3+k3s1", 1},
		{"Node_Upper.example.com", "v2", 1}, {strings.Repeat("n", 80), "v2", 1}, {strings.Repeat("n", 80), "v3", 1},
	} {
		got := JobName(tc.node, tc.version, tc.attempt)
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
			t.Errorf("JobName(%+v) = %q is not a DNS label: %v", tc, got, errs)
		}
		if names[got] {
			t.Errorf("JobName(%+v) = %q collides", tc, got)
		}
		names[got] = true
	}
}

func TestChannelOf(t *testing.T) {
	long := strings.Repeat("c", 70)
	for _, c := range []struct {
		name string
		meta metav1.ObjectMeta
		want string
	}{
		{"exact name from the annotation", metav1.ObjectMeta{Annotations: map[string]string{AnnotationJobChannel: long}, Labels: map[string]string{LabelJobChannel: LabelValue(long)}}, long},
		{"an older agent's Job: the label", metav1.ObjectMeta{Labels: map[string]string{LabelJobChannel: "default"}}, "default"},
		{"neither", metav1.ObjectMeta{}, ""},
	} {
		if got := channelOf(c.meta); got != c.want {
			t.Errorf("%s: channelOf = %q, want %q", c.name, got, c.want)
		}
	}
}

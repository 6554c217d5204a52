package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A job list past a ConfigMap's 1 MiB goes gzipped into binaryData under
// the same key; data wins when both hold it; anything else is refused with
// what to do.
func TestListText(t *testing.T) {
	gz, err := gzipBytes([]byte("a\nb\n"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		data       map[string]string
		binary     map[string][]byte
		want       string
		wantReason string
	}{
		{"data", map[string]string{"jobs": "a\n"}, nil, "a\n", ""},
		{"gzipped binaryData", nil, map[string][]byte{"jobs": gz}, "a\nb\n", ""},
		{"data first", map[string]string{"jobs": "x\n"}, map[string][]byte{"jobs": gz}, "x\n", ""},
		{"binaryData not gzipped", nil, map[string][]byte{"jobs": []byte("a\n")}, "", ReasonBadJobs},
		{"no such key", map[string]string{"other": "a"}, nil, "", ReasonJobsNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "list"}, Data: c.data, BinaryData: c.binary}
			text, bad := listText(cm, "jobs")
			switch {
			case c.wantReason == "" && (bad != nil || text != c.want):
				t.Errorf("got %q, %v; want %q", text, bad, c.want)
			case c.wantReason != "" && (bad == nil || bad.reason != c.wantReason || !strings.Contains(bad.message, "list")):
				t.Errorf("got %q, %v; want reason %s naming the ConfigMap", text, bad, c.wantReason)
			}
		})
	}
}

package agent

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/protocol"
)

func TestChannelOf(t *testing.T) {
	long := strings.Repeat("c", 70)
	for _, c := range []struct {
		name string
		meta metav1.ObjectMeta
		want string
	}{
		{"exact name from the annotation", metav1.ObjectMeta{Annotations: map[string]string{protocol.AnnotationJobChannel: long}, Labels: map[string]string{protocol.LabelJobChannel: protocol.LabelValue(long)}}, long},
		{"an older agent's Job: the label", metav1.ObjectMeta{Labels: map[string]string{protocol.LabelJobChannel: "default"}}, "default"},
		{"neither", metav1.ObjectMeta{}, ""},
	} {
		if got := channelOf(c.meta); got != c.want {
			t.Errorf("%s: channelOf = %q, want %q", c.name, got, c.want)
		}
	}
}

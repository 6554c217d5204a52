package eds

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

func TestRollingLimits(t *testing.T) {
	ten, pct, three := intstr.FromInt32(10), intstr.FromString("10%"), int32(3)
	tests := []struct {
		name     string
		spec     v1.ExtendedDaemonSetSpecStrategyRollingUpdate
		nodes    int
		elapsed  time.Duration
		unavail  int
		creation int
	}{
		{"defaults: one unavailable, slow start at one", v1.ExtendedDaemonSetSpecStrategyRollingUpdate{}, 100, 0, 1, 1},
		{"slow start grows each minute", v1.ExtendedDaemonSetSpecStrategyRollingUpdate{}, 100, 150 * time.Second, 1, 3},
		{"never below maxUnavailable", v1.ExtendedDaemonSetSpecStrategyRollingUpdate{MaxUnavailable: &ten}, 100, 0, 10, 10},
		{"percentages of the nodes", v1.ExtendedDaemonSetSpecStrategyRollingUpdate{MaxUnavailable: &pct}, 55, 0, 6, 6},
		{"maxParallelPodCreation caps", v1.ExtendedDaemonSetSpecStrategyRollingUpdate{MaxUnavailable: &ten, MaxParallelPodCreation: &three}, 100, time.Hour, 10, 3},
	}
	for _, tt := range tests {
		l, err := rollingOf(&tt.spec).limits(tt.nodes, tt.elapsed)
		if err != nil || l.MaxUnavailable != tt.unavail || l.MaxCreation != tt.creation {
			t.Errorf("%s: %+v, %v; want maxUnavailable %d, creation %d", tt.name, l, err, tt.unavail, tt.creation)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := daemon("a", "x:1")
	noContainers := daemon("a", "x:1")
	noContainers.Spec.Template.Spec.Containers = nil
	badRestarts := withCanary(daemon("a", "x:1"), time.Minute)
	one, five := int32(1), int32(5)
	badRestarts.Spec.Strategy.Canary.AutoPause = &v1.ExtendedDaemonSetSpecStrategyCanaryAutoPause{MaxRestarts: &five}
	badRestarts.Spec.Strategy.Canary.AutoFail = &v1.ExtendedDaemonSetSpecStrategyCanaryAutoFail{MaxRestarts: &one}
	badTimeout := withCanary(daemon("a", "x:1"), time.Hour)
	badTimeout.Spec.Strategy.Canary.AutoFail = &v1.ExtendedDaemonSetSpecStrategyCanaryAutoFail{CanaryTimeout: &metav1.Duration{Duration: time.Minute}}
	badSelector := daemon("a", "x:1")
	badSelector.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Bogus"}}}
	badPct := daemon("a", "x:1")
	p := intstr.FromString("ten%")
	badPct.Spec.Strategy.RollingUpdate.MaxUnavailable = &p
	longest, tooLong := daemon(strings.Repeat("a", MaxNameLength), "x:1"), daemon(strings.Repeat("a", MaxNameLength+1), "x:1")
	for name, tt := range map[string]struct {
		e    *v1.ExtendedDaemonSet
		fail bool
	}{"ok": {ok, false}, "name of 52": {longest, false}, "name of 53 (issue 24 item 11)": {tooLong, true}, "no containers": {noContainers, true}, "autoFail below autoPause": {badRestarts, true},
		"timeout below duration": {badTimeout, true}, "bad selector": {badSelector, true}, "bad percentage": {badPct, true}} {
		if err := validate(tt.e); (err != nil) != tt.fail {
			t.Errorf("%s: validate() = %v, want error %v", name, err, tt.fail)
		}
	}
}

// Issue 24 item 9: canaryTimeout has a default, so a canary whose pods
// never become Ready ends (TimeoutExceeded).
func TestCanaryTimeoutDefault(t *testing.T) {
	manual := &v1.ExtendedDaemonSetSpecStrategyCanary{ValidationMode: v1.ValidationModeManual}
	long := &v1.ExtendedDaemonSetSpecStrategyCanary{Duration: &metav1.Duration{Duration: 24 * time.Hour}}
	manualWithTimeout := &v1.ExtendedDaemonSetSpecStrategyCanary{ValidationMode: v1.ValidationModeManual,
		AutoFail: &v1.ExtendedDaemonSetSpecStrategyCanaryAutoFail{CanaryTimeout: &metav1.Duration{Duration: 48 * time.Hour}}}
	set := &v1.ExtendedDaemonSetSpecStrategyCanary{AutoFail: &v1.ExtendedDaemonSetSpecStrategyCanaryAutoFail{CanaryTimeout: &metav1.Duration{Duration: 3 * time.Hour}}}
	for name, tt := range map[string]struct {
		c    *v1.ExtendedDaemonSetSpecStrategyCanary
		want time.Duration
	}{
		"auto, defaults":       {&v1.ExtendedDaemonSetSpecStrategyCanary{}, time.Hour + 15*time.Minute},
		"auto, duration 24h":   {long, 25*time.Hour + 5*time.Minute},
		"manual: none":         {manual, 0},
		"manual, opted in":     {manualWithTimeout, 48 * time.Hour},
		"set: kept as written": {set, 3 * time.Hour},
	} {
		if got := canaryPolicy(tt.c).CanaryTimeout; got != tt.want {
			t.Errorf("%s: canaryTimeout %v, want %v", name, got, tt.want)
		}
	}
}

func TestTemplateHashIsStable(t *testing.T) {
	a, b := daemon("a", "x:1"), daemon("a", "x:1")
	if TemplateHash(&a.Spec.Template) != TemplateHash(&b.Spec.Template) {
		t.Error("equal templates hash differently")
	}
	b.Spec.Template.Spec.Containers[0].Image = "x:2"
	if TemplateHash(&a.Spec.Template) == TemplateHash(&b.Spec.Template) {
		t.Error("different templates hash alike")
	}
	p := buildPod(a, &v1.ExtendedDaemonSetReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "a-1"}, Spec: v1.ExtendedDaemonSetReplicaSetSpec{Template: a.Spec.Template}},
		"node-9", override{containers: map[string]corev1.ResourceRequirements{}}, true)
	if nodeOf(p) != "node-9" || p.Labels[v1.LabelCanary] != "true" || len(p.Spec.Tolerations) != 7 {
		t.Errorf("buildPod: node %q, labels %v, %d tolerations", nodeOf(p), p.Labels, len(p.Spec.Tolerations))
	}
}

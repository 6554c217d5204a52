package plan

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
func bptr(b bool) *bool                    { return &b }

func TestResolveRefuses(t *testing.T) {
	ok := v1.UpdateChannelSpec{URL: "file:///mirror"}
	for _, tc := range []struct {
		name   string
		edit   func(*v1.UpdateChannelSpec)
		reason string
	}{
		{"no url", func(s *v1.UpdateChannelSpec) { s.URL = "" }, ReasonBadURL},
		{"unknown scheme", func(s *v1.UpdateChannelSpec) { s.URL = "ftp://host/x" }, ReasonBadURL},
		{"negative concurrency", func(s *v1.UpdateChannelSpec) { s.Concurrency = -1 }, ReasonBadConcurrency},
		{"negative maxFailures", func(s *v1.UpdateChannelSpec) { s.MaxFailures = -2 }, ReasonBadMaxFailures},
		{"window start", func(s *v1.UpdateChannelSpec) { s.Window = &v1.Window{Start: "9am", End: "10:00"} }, ReasonBadWindow},
		{"window zone", func(s *v1.UpdateChannelSpec) {
			s.Window = &v1.Window{Start: "09:00", End: "10:00", TimeZone: "Nowhere/Town"}
		}, ReasonBadWindow},
		{"window day", func(s *v1.UpdateChannelSpec) {
			s.Window = &v1.Window{Days: []string{"xyz"}, Start: "09:00", End: "10:00"}
		}, ReasonBadWindow},
		{"zero poll interval", func(s *v1.UpdateChannelSpec) { s.PollInterval = dur(0) }, ReasonBadDuration},
		{"tiny poll interval", func(s *v1.UpdateChannelSpec) { s.PollInterval = dur(time.Millisecond) }, ReasonBadDuration},
		{"negative reboot delay", func(s *v1.UpdateChannelSpec) { s.RebootDelay = dur(-time.Second) }, ReasonBadDuration},
		{"huge upgrade timeout", func(s *v1.UpdateChannelSpec) { s.UpgradeTimeout = dur(30 * 24 * time.Hour) }, ReasonBadDuration},
		{"zero drain timeout", func(s *v1.UpdateChannelSpec) { s.Drain = &v1.DrainSpec{Timeout: dur(0)} }, ReasonBadDuration},
		{"bad pod selector", func(s *v1.UpdateChannelSpec) { s.Drain = &v1.DrainSpec{PodSelector: "a in (("} }, ReasonBadSelector},
		{"bad node selector", func(s *v1.UpdateChannelSpec) {
			s.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Nope"}}}
		}, ReasonBadSelector},
		{"no rootfs", func(s *v1.UpdateChannelSpec) { s.Components = &v1.Components{Rootfs: bptr(false)} }, ReasonBadComponents},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := ok
			tc.edit(&spec)
			_, bad := Resolve(spec)
			if bad == nil || bad.Reason != tc.reason {
				t.Fatalf("Resolve = %v, want reason %s", bad, tc.reason)
			}
			if bad.Message == "" {
				t.Fatal("an Invalid needs a message")
			}
		})
	}
}

func TestResolveDefaults(t *testing.T) {
	s, bad := Resolve(v1.UpdateChannelSpec{URL: "https://example.com/releases/latest", Version: "latest"})
	if bad != nil {
		t.Fatal(bad)
	}
	want := Settings{Concurrency: 1, MaxFailures: 1, PollInterval: 15 * time.Minute, RebootDelay: 5 * time.Second,
		UpgradeTimeout: 15 * time.Minute, NodeReadyTimeout: 10 * time.Minute}
	if s.Version != "" || !Following(s) {
		t.Errorf("version latest must mean following, got %q", s.Version)
	}
	if s.Concurrency != want.Concurrency || s.MaxFailures != want.MaxFailures || s.PollInterval != want.PollInterval ||
		s.RebootDelay != want.RebootDelay || s.UpgradeTimeout != want.UpgradeTimeout || s.NodeReadyTimeout != want.NodeReadyTimeout {
		t.Errorf("defaults = %+v", s)
	}
	if !s.Drain.Enabled || !s.Drain.IgnoreDaemonSets || s.Drain.Timeout != 10*time.Minute || s.Drain.Force {
		t.Errorf("drain defaults = %+v", s.Drain)
	}
	if s.Components != (Components{Rootfs: true, Kernel: true}) {
		t.Errorf("components = %+v", s.Components)
	}
	if s.Window != nil || !s.Selector.Empty() {
		t.Errorf("window and selector must default to always and everything")
	}
}

func TestResolveKeepsValues(t *testing.T) {
	s, bad := Resolve(v1.UpdateChannelSpec{URL: "/srv/mirror", Version: "v2", Concurrency: 3, RebootDelay: dur(0),
		Drain:  &v1.DrainSpec{Enabled: bptr(false), Force: true, PodSelector: "app=web"},
		Window: &v1.Window{Days: []string{"sat"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}})
	if bad != nil {
		t.Fatal(bad)
	}
	if s.Version != "v2" || s.Concurrency != 3 || s.RebootDelay != 0 || s.Drain.Enabled || !s.Drain.Force ||
		s.Drain.PodSelector != "app=web" || s.Window == nil {
		t.Errorf("settings = %+v", s)
	}
}

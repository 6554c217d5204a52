// Package plan holds the decisions of the node agent (ops/agent) and the
// controller (ops/controller) as pure functions: whether a
// channel's spec can be acted on and with which defaults, which version is
// the target, which nodes may take a slot and in which order, whether a poll
// is due, which slot is stale, and how long a failed node waits before its
// retry, which step a node takes next. Nothing here talks to the API server
// or reads the clock; the handlers of both programs pass the state and the
// time in.
package plan

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/window"
	"slipway.dev/slipway/upgrade/channel/channelurl"
)

// Reasons of the Invalid condition.
const (
	ReasonBadURL         = "BadURL"
	ReasonBadConcurrency = "BadConcurrency"
	ReasonBadWindow      = "BadWindow"
	ReasonBadDuration    = "BadDuration"
	ReasonBadSelector    = "BadSelector"
	ReasonBadMaxFailures = "BadMaxFailures"
	ReasonBadComponents  = "BadComponents"
	ReasonBadVersion     = "BadVersion"
)

// Invalid says why a spec cannot be acted on.
type Invalid struct {
	Reason  string // CamelCase, for the condition's reason
	Message string // for people: what is wrong and what to write instead
}

func (i *Invalid) Error() string { return i.Reason + ": " + i.Message }

// Drain is the resolved drain policy: whether to drain, and how (the
// agent hands these to ops/drain; this package holds decisions only and
// does not import it).
type Drain struct {
	Enabled            bool
	Timeout            time.Duration // bounds the whole drain
	GracePeriodSeconds *int64        // overrides each pod's grace period; nil keeps the pod's own
	DeleteEmptyDirData bool          // evict pods with emptyDir volumes
	IgnoreDaemonSets   bool          // leave DaemonSet pods in place
	Force              bool          // delete what eviction could not move by the timeout
	PodSelector        string        // drain only matching pods
}

// Components is the resolved set of parts an upgrade replaces.
type Components struct{ Rootfs, Kernel, K3s bool }

// Settings is a validated spec with every default applied.
type Settings struct {
	URL              string
	Version          string // "" when following latest
	Concurrency      int
	MaxFailures      int
	Paused           bool
	PollInterval     time.Duration
	RebootDelay      time.Duration
	UpgradeTimeout   time.Duration
	NodeReadyTimeout time.Duration
	Selector         labels.Selector
	Window           *window.Window // nil: always open
	Drain            Drain
	Components       Components
	Image            string
	// Prestage is spec.prestage.concurrency; PrestageAuto when unset (a
	// quarter of the channel's nodes, see PrestageLimit).
	Prestage int
}

// Resolve validates spec and applies the defaults. A spec it refuses comes
// back as *Invalid.
func Resolve(spec v1.UpdateChannelSpec) (Settings, *Invalid) {
	s := Settings{
		URL:         spec.URL,
		Concurrency: orInt(spec.Concurrency, v1.DefaultConcurrency),
		MaxFailures: orInt(spec.MaxFailures, v1.DefaultMaxFailures),
		Paused:      spec.Paused,
		Image:       spec.Image,
		Prestage:    PrestageAuto,
	}
	if p := spec.Prestage; p != nil && p.Concurrency != nil {
		s.Prestage = *p.Concurrency
	}
	if err := channelurl.Validate(spec.URL); err != nil || spec.URL == "" {
		return s, &Invalid{ReasonBadURL, fmt.Sprintf("spec.url %q is not a release channel (%v): use github-releases://owner/repo, https://host/path/latest or file:///mirror", spec.URL, err)}
	}
	if spec.Version != v1.VersionLatest {
		s.Version = spec.Version
	}
	if s.Concurrency < 1 {
		return s, &Invalid{ReasonBadConcurrency, fmt.Sprintf("spec.concurrency is %d: it must be 1 or more", spec.Concurrency)}
	}
	if s.Prestage < 0 && s.Prestage != PrestageAuto {
		return s, &Invalid{ReasonBadConcurrency, fmt.Sprintf("spec.prestage.concurrency is %d: it must be 0 (off) or more", s.Prestage)}
	}
	if s.MaxFailures < 1 {
		return s, &Invalid{ReasonBadMaxFailures, fmt.Sprintf("spec.maxFailures is %d: it must be 1 or more", spec.MaxFailures)}
	}
	if bad := resolveDurations(spec, &s); bad != nil {
		return s, bad
	}
	if bad := resolveSelector(spec, &s); bad != nil {
		return s, bad
	}
	if w := spec.Window; w != nil {
		parsed, err := window.Parse(w.Days, w.Start, w.End, w.TimeZone)
		if err != nil {
			return s, &Invalid{ReasonBadWindow, "spec.window: " + err.Error()}
		}
		s.Window = parsed
	}
	if bad := resolveDrain(spec.Drain, &s); bad != nil {
		return s, bad
	}
	return s, resolveComponents(spec.Components, &s)
}

func resolveDurations(spec v1.UpdateChannelSpec, s *Settings) *Invalid {
	for _, d := range []struct {
		field string
		in    *metav1.Duration
		def   time.Duration
		out   *time.Duration
		zero  bool // whether zero is allowed
	}{
		{"pollInterval", spec.PollInterval, v1.DefaultPollInterval, &s.PollInterval, false},
		{"rebootDelay", spec.RebootDelay, v1.DefaultRebootDelay, &s.RebootDelay, true},
		{"upgradeTimeout", spec.UpgradeTimeout, v1.DefaultUpgradeTimeout, &s.UpgradeTimeout, false},
		{"nodeReadyTimeout", spec.NodeReadyTimeout, v1.DefaultNodeReadyTimeout, &s.NodeReadyTimeout, false},
	} {
		*d.out = d.def
		if d.in == nil {
			continue
		}
		v := d.in.Duration
		if v < 0 || (v == 0 && !d.zero) || v > 7*24*time.Hour {
			return &Invalid{ReasonBadDuration, fmt.Sprintf("spec.%s is %s: it must be more than 0 and at most a week", d.field, v)}
		}
		*d.out = v
	}
	if s.PollInterval < time.Second {
		return &Invalid{ReasonBadDuration, fmt.Sprintf("spec.pollInterval is %s: poll at most once a second", s.PollInterval)}
	}
	return nil
}

func resolveSelector(spec v1.UpdateChannelSpec, s *Settings) *Invalid {
	s.Selector = labels.Everything()
	if spec.NodeSelector == nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(spec.NodeSelector)
	if err != nil {
		return &Invalid{ReasonBadSelector, "spec.nodeSelector: " + err.Error()}
	}
	s.Selector = sel
	return nil
}

func resolveDrain(d *v1.DrainSpec, s *Settings) *Invalid {
	s.Drain = Drain{Enabled: true, Timeout: v1.DefaultDrainTimeout, IgnoreDaemonSets: true}
	if d == nil {
		return nil
	}
	s.Drain.Enabled = orBool(d.Enabled, true)
	s.Drain.IgnoreDaemonSets = orBool(d.IgnoreDaemonSets, true)
	s.Drain.DeleteEmptyDirData = d.DeleteEmptyDirData
	s.Drain.Force = d.Force
	s.Drain.GracePeriodSeconds = d.GracePeriodSeconds
	if d.GracePeriodSeconds != nil && *d.GracePeriodSeconds < 0 {
		return &Invalid{ReasonBadDuration, fmt.Sprintf("spec.drain.gracePeriodSeconds is %d: it must be 0 or more", *d.GracePeriodSeconds)}
	}
	if d.Timeout != nil {
		if d.Timeout.Duration <= 0 {
			return &Invalid{ReasonBadDuration, fmt.Sprintf("spec.drain.timeout is %s: it must be more than 0", d.Timeout.Duration)}
		}
		s.Drain.Timeout = d.Timeout.Duration
	}
	if d.PodSelector != "" {
		if _, err := labels.Parse(d.PodSelector); err != nil {
			return &Invalid{ReasonBadSelector, "spec.drain.podSelector: " + err.Error()}
		}
		s.Drain.PodSelector = d.PodSelector
	}
	return nil
}

func resolveComponents(c *v1.Components, s *Settings) *Invalid {
	s.Components = Components{Rootfs: true, Kernel: true}
	if c != nil {
		s.Components = Components{Rootfs: orBool(c.Rootfs, true), Kernel: orBool(c.Kernel, true), K3s: orBool(c.K3s, false)}
	}
	if !s.Components.Rootfs {
		// The rootfs version is the release a node runs: without it the
		// agents could not tell which nodes are done.
		return &Invalid{ReasonBadComponents, "spec.components.rootfs is false: the rootfs names the release a node runs, so a channel always replaces it"}
	}
	return nil
}

func orInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func orBool(v *bool, def bool) bool {
	if v == nil {
		return def
	}
	return *v
}

// MirrorDir is the directory of a mirror channel (file:///dir or an
// absolute path), "" for other channels.
func MirrorDir(source string) string {
	switch {
	case strings.HasPrefix(source, "file://"):
		u, err := url.Parse(source)
		if err != nil || u.Path == "" || (u.Host != "" && u.Host != "localhost") {
			return ""
		}
		return filepath.Clean(u.Path)
	case filepath.IsAbs(source):
		return filepath.Clean(source)
	}
	return ""
}

// GitHubScheme starts the URL of a channel of GitHub releases.
const GitHubScheme = "github-releases://"

// SecretKey is the key of the token in the Secret ref names (default "token").
func SecretKey(ref *v1.SecretKeyRef) string {
	if ref.Key == "" {
		return "token"
	}
	return ref.Key
}

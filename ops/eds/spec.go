package eds

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/eds/plan"
)

// TemplateHash is the hash naming a pod template's ERS: the first 10 hex
// digits of the SHA-256 of its JSON.
func TemplateHash(t *corev1.PodTemplateSpec) string {
	raw, _ := json.Marshal(t) // a PodTemplateSpec always marshals
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])[:10]
}

// MaxNameLength is the longest ExtendedDaemonSet name: "<name>-<10 hex
// digits>" names its ERSs, and that is a pod label value (63 at most).
const MaxNameLength = 52

// ERSName is the name of the ERS of an ExtendedDaemonSet's template hash.
func ERSName(eds, hash string) string {
	const maxPrefix = 253 - 11
	if len(eds) > maxPrefix {
		eds = eds[:maxPrefix]
	}
	return eds + "-" + hash
}

// rolling is an ExtendedDaemonSet's rolling update with defaults applied.
type rolling struct {
	maxUnavailable, maxSchedulerFailure *intstr.IntOrString
	maxParallel                         int
	interval                            time.Duration
	increase                            *intstr.IntOrString
}

func rollingOf(s *v1.ExtendedDaemonSetSpecStrategyRollingUpdate) rolling {
	r := rolling{maxUnavailable: s.MaxUnavailable, maxSchedulerFailure: s.MaxPodSchedulerFailure,
		maxParallel: 250, interval: time.Minute, increase: s.SlowStartAdditiveIncrease}
	if s.MaxParallelPodCreation != nil {
		r.maxParallel = int(*s.MaxParallelPodCreation)
	}
	if s.SlowStartIntervalDuration != nil {
		r.interval = s.SlowStartIntervalDuration.Duration
	}
	return r
}

// limits resolves the rolling limits over nodes eligible nodes, elapsed
// after the active template started.
func (r rolling) limits(nodes int, elapsed time.Duration) (plan.Limits, error) {
	var l plan.Limits
	var err error
	if l.MaxUnavailable, err = plan.Scaled(r.maxUnavailable, nodes, 1); err != nil {
		return l, fmt.Errorf("spec.strategy.rollingUpdate.maxUnavailable: %w", err)
	}
	l.MaxUnavailable = max(l.MaxUnavailable, 1)
	if l.MaxPodSchedulerFailure, err = plan.Scaled(r.maxSchedulerFailure, nodes, 0); err != nil {
		return l, fmt.Errorf("spec.strategy.rollingUpdate.maxPodSchedulerFailure: %w", err)
	}
	increase, err := plan.Scaled(r.increase, nodes, 1)
	if err != nil {
		return l, fmt.Errorf("spec.strategy.rollingUpdate.slowStartAdditiveIncrease: %w", err)
	}
	if r.maxParallel < 1 {
		return l, errors.New("spec.strategy.rollingUpdate.maxParallelPodCreation must be at least 1")
	}
	// Slow start paces pods onto nodes that had none; it never holds a
	// rolling update below maxUnavailable pods in flight, which the
	// deletions already bound.
	l.MaxCreation = min(r.maxParallel, max(plan.SlowStart(r.maxParallel, increase, r.interval, elapsed), l.MaxUnavailable))
	return l, nil
}

// Default canaryTimeout (DataDog has none: a canary whose pods never
// become Ready stayed in Canary forever): in auto mode one hour past the
// earliest validation (duration + noRestartsDuration: 1h15m at the
// defaults). In manual mode none: a release left for a person's approval
// waits for it (a weekend included); autoFail.canaryTimeout opts in.
const defaultCanaryTimeoutMargin = time.Hour

// canaryPolicy is a canary's policy with defaults applied.
func canaryPolicy(c *v1.ExtendedDaemonSetSpecStrategyCanary) plan.CanaryPolicy {
	p := plan.CanaryPolicy{Manual: c.ValidationMode == v1.ValidationModeManual,
		AutoPause: true, PauseMaxRestarts: 2, AutoFail: true, FailMaxRestarts: 5}
	if !p.Manual {
		p.Duration, p.NoRestartsDuration = v1.DefaultCanaryDuration, v1.DefaultCanaryNoRestartsDuration
		if c.Duration != nil {
			p.Duration = c.Duration.Duration
		}
		if c.NoRestartsDuration != nil {
			p.NoRestartsDuration = c.NoRestartsDuration.Duration
		}
	}
	if a := c.AutoPause; a != nil {
		p.AutoPause = a.Enabled == nil || *a.Enabled
		if a.MaxRestarts != nil {
			p.PauseMaxRestarts = *a.MaxRestarts
		}
		if a.MaxSlowStartDuration != nil {
			p.MaxSlowStartDuration = a.MaxSlowStartDuration.Duration
		}
	}
	if a := c.AutoFail; a != nil {
		p.AutoFail = a.Enabled == nil || *a.Enabled
		if a.MaxRestarts != nil {
			p.FailMaxRestarts = *a.MaxRestarts
		}
		if a.MaxRestartsDuration != nil {
			p.MaxRestartsDuration = a.MaxRestartsDuration.Duration
		}
		if a.CanaryTimeout != nil {
			p.CanaryTimeout = a.CanaryTimeout.Duration
		}
	}
	if (c.AutoFail == nil || c.AutoFail.CanaryTimeout == nil) && !p.Manual {
		p.CanaryTimeout = p.Duration + p.NoRestartsDuration + defaultCanaryTimeoutMargin
	}
	return p
}

// validate reports what the schema could not refuse (an ExtendedDaemonSet
// created before the CRD's rules, or one the rules cannot express).
func validate(e *v1.ExtendedDaemonSet) error {
	if len(e.Name) > MaxNameLength {
		return fmt.Errorf("metadata.name %q has %d characters, at most %d: its ERS names (<name>-<10 hex digits>) are pod label values, at most 63 characters; recreate it under a shorter name", e.Name, len(e.Name), MaxNameLength)
	}
	if len(e.Spec.Template.Spec.Containers) == 0 {
		return errors.New("spec.template.spec.containers is empty: a pod needs at least one container")
	}
	if _, err := plan.Selector(e.Spec.Selector); err != nil {
		return fmt.Errorf("spec.selector: %w", err)
	}
	if c := e.Spec.Strategy.Canary; c != nil {
		p := canaryPolicy(c)
		if p.AutoFail && p.AutoPause && p.FailMaxRestarts < p.PauseMaxRestarts {
			return fmt.Errorf("spec.strategy.canary: autoFail.maxRestarts (%d) must be at least autoPause.maxRestarts (%d)", p.FailMaxRestarts, p.PauseMaxRestarts)
		}
		if p.CanaryTimeout > 0 && p.CanaryTimeout <= p.Duration {
			return fmt.Errorf("spec.strategy.canary: autoFail.canaryTimeout (%s) must be longer than duration (%s)", p.CanaryTimeout, p.Duration)
		}
		if _, err := plan.Selector(c.NodeSelector); err != nil {
			return fmt.Errorf("spec.strategy.canary.nodeSelector: %w", err)
		}
		if _, err := plan.Scaled(c.Replicas, 100, 1); err != nil {
			return fmt.Errorf("spec.strategy.canary.replicas: %w", err)
		}
		if _, err := resolveCanaryAnalysis(c.Analysis); err != nil {
			return err
		}
	}
	_, err := rollingOf(&e.Spec.Strategy.RollingUpdate).limits(1, 0)
	return err
}

// annotation reads one of our annotation keys from m, or else its DataDog twin.
func annotation(m map[string]string, key string) (string, bool) {
	if v, ok := m[key]; ok {
		return v, true
	}
	v, ok := m[v1.DataDog(key)]
	return v, ok
}

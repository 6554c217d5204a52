package controller

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/upgrade/channel"
)

// pollTimeout bounds one resolution of `latest`.
const pollTimeout = time.Minute

// poll takes status.polling, resolves the channel's latest version, records
// it (or why it failed) and lets go of status.polling.
func (ctl *Controller) poll(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings) (*v1.UpdateChannel, error) {
	since := metav1.NewTime(wallclock.Now())
	ch, err := ctl.updateStatus(ctx, ch.Name, func(c *v1.UpdateChannel) error {
		c.Status.Polling = &v1.Poller{Node: ctl.opts.Identity, Since: since} // replaces a poller that vanished
		return nil
	})
	if err != nil {
		return nil, err
	}
	latest, perr := ctl.resolveLatest(ctx, ch, s)
	old := ch.Status.LatestVersion
	ch, err = ctl.updateStatus(ctx, ch.Name, func(c *v1.UpdateChannel) error {
		st := &c.Status
		if st.Polling != nil && st.Polling.Node == ctl.opts.Identity {
			st.Polling = nil
		}
		cond := metav1.Condition{Type: v1.ConditionPolled, Status: metav1.ConditionTrue, Reason: "Polled",
			Message: "the newest release is " + latest, ObservedGeneration: c.Generation}
		if perr != nil {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "PollFailed", perr.Error()
		} else {
			now := metav1.NewTime(wallclock.Now())
			st.LatestVersion, st.LastPolled = latest, &now
		}
		meta.SetStatusCondition(&st.Conditions, cond)
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch {
	case perr != nil:
		ctl.metrics.polls.WithLabelValues("error").Inc()
		ctl.log.Warn("polling the channel failed", "channel", ch.Name, "err", perr)
		ctl.recorder.Eventf(ch, corev1.EventTypeWarning, "PollFailed", "could not resolve the latest release: %v", perr)
	case latest != old:
		ctl.metrics.polls.WithLabelValues("new").Inc()
		ctl.log.Info("new release", "channel", ch.Name, "version", latest, "previous", old)
		ctl.recorder.Eventf(ch, corev1.EventTypeNormal, "NewRelease", "the newest release is %s (was %q)", latest, old)
	default:
		ctl.metrics.polls.WithLabelValues("same").Inc()
	}
	return ch, nil
}

// resolveLatest asks the channel for its latest release, with the
// channel's own token (spec.tokenSecretRef) when it names one. A mirror
// directory this process cannot see is the manifest's to mount.
func (ctl *Controller) resolveLatest(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	token, err := ctl.channelToken(ctx, ch)
	if err != nil {
		return "", err
	}
	if dir := plan.MirrorDir(s.URL); dir != "" {
		if _, err := os.Stat(dir); err != nil {
			return "", fmt.Errorf("the agent's pod does not see the mirror directory %s (render the manifest with --mirror-dir %s to mount it): %w", dir, dir, err)
		}
	}
	src, err := channel.New(s.URL, channel.Options{GitHubToken: token, UserAgent: "slipway-agent"})
	if err != nil {
		return "", err
	}
	return src.Latest(ctx)
}

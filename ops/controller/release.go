package controller

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-github/v84/github"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/plan"
)

// The release of a GitHub channel is resolved once per rollout, by the
// agent holding the channel's Lease: one API request for the release by
// its tag (and one for the repository's visibility), recorded in
// status.resolved. The upgrade Jobs then download the artifacts from the
// release's download URLs, which are not API calls, so a fleet behind one
// address does not exhaust the API's rate limit a few nodes in.

// resolveRelease returns the release of target for a GitHub channel: the
// one status.resolved already holds, or a new resolution. nil for other
// channels, or when target is not known yet.
func (ctl *Controller) resolveRelease(ctx context.Context, ch *v1.UpdateChannel, s plan.Settings, target string) (*v1.ResolvedRelease, error) {
	if target == "" || !strings.HasPrefix(s.URL, plan.GitHubScheme) {
		return nil, nil
	}
	if r := ch.Status.Resolved; r != nil && r.Version == target {
		return r, nil
	}
	owner, repo, ok := strings.Cut(strings.Trim(strings.TrimPrefix(s.URL, plan.GitHubScheme), "/"), "/")
	if !ok {
		return nil, fmt.Errorf("channel URL %s is not github-releases://owner/repo", s.URL)
	}
	token, err := ctl.channelToken(ctx, ch)
	if err != nil {
		return nil, err
	}
	api, err := ctl.githubClient(token)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	ctl.metrics.fleet.resolves.Inc()
	rel, _, err := api.Repositories.GetReleaseByTag(ctx, owner, repo, target)
	if err != nil {
		return nil, fmt.Errorf("resolve release %s of %s: %w", target, s.URL, err)
	}
	source, err := downloadBase(rel, target)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.URL, err)
	}
	if token != "" {
		// A private repository's download URLs need the API and its token:
		// its Jobs keep the GitHub channel (with the token from the Secret).
		if r, _, err := api.Repositories.Get(ctx, owner, repo); err == nil && r.GetPrivate() {
			source = s.URL
		}
	}
	return &v1.ResolvedRelease{Version: target, Source: source, At: metav1.NewTime(wallclock.Now())}, nil
}

// downloadBase derives, from a release's assets' download URLs
// (<base>/download/<tag>/<name>), the http(s) channel <base> that serves
// them without the API.
func downloadBase(rel *github.RepositoryRelease, tag string) (string, error) {
	for _, as := range rel.Assets {
		u := as.GetBrowserDownloadURL()
		suffix := "/download/" + url.PathEscape(tag) + "/" + url.PathEscape(as.GetName())
		if base, ok := strings.CutSuffix(u, suffix); ok && (strings.HasPrefix(base, "https://") || strings.HasPrefix(base, "http://")) {
			return base, nil
		}
	}
	return "", fmt.Errorf("release %s has no asset with a download URL of the form .../download/%s/<name>: publish the artifacts as release assets", tag, tag)
}

// githubClient is a GitHub API client with token (if any), at
// Options.GitHubBaseURL when set.
func (ctl *Controller) githubClient(token string) (*github.Client, error) {
	api := github.NewClient(&http.Client{Timeout: pollTimeout})
	if token != "" {
		api = api.WithAuthToken(token)
	}
	api.UserAgent = "slipway-agent"
	if ctl.opts.GitHubBaseURL != "" {
		base, err := url.Parse(strings.TrimSuffix(ctl.opts.GitHubBaseURL, "/") + "/")
		if err != nil || base.Host == "" {
			return nil, fmt.Errorf("GitHub API base URL %q: want http(s)://host/path/", ctl.opts.GitHubBaseURL)
		}
		api.BaseURL = base
	}
	return api, nil
}

// channelToken reads the token of ch's spec.tokenSecretRef ("" when it
// names none; else the controller's own --github-token, if any).
func (ctl *Controller) channelToken(ctx context.Context, ch *v1.UpdateChannel) (string, error) {
	ref := ch.Spec.TokenSecretRef
	if ref == nil {
		return ctl.opts.GitHubToken, nil
	}
	sec, err := ctl.kube.CoreV1().Secrets(ctl.opts.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return "", tokenReadError(ctl.opts.Namespace, ch.Name, ref, err)
	}
	tok, ok := sec.Data[plan.SecretKey(ref)]
	if !ok {
		return "", fmt.Errorf("the token Secret %s of channel %s has no key %q: add it or set spec.tokenSecretRef.key", ref.Name, ch.Name, plan.SecretKey(ref))
	}
	return strings.TrimSpace(string(tok)), nil
}

// tokenReadError is what a failed read of channel's token Secret (ref,
// in namespace ns) says: how to name it when the controller may not read
// it, how to make it when it is not there, and otherwise (no answer yet)
// the error as it came, with no advice: the Secret may well be there.
func tokenReadError(ns, channel string, ref *v1.SecretKeyRef, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the agent may read only the token Secrets the manifest names, not %s of channel %s (name it slipway-github-token, or render the manifest with --token-secret %s): %w",
			ref.Name, channel, ref.Name, err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("read the token Secret %s named by spec.tokenSecretRef of channel %s (create it: kubectl -n %s create secret generic %s --from-literal=%s=<token>): %w",
			ref.Name, channel, ns, ref.Name, plan.SecretKey(ref), err)
	}
	return fmt.Errorf("read the token Secret %s named by spec.tokenSecretRef of channel %s: %w", ref.Name, channel, err)
}

// resolveOnce resolves the target release of ch if it is a GitHub channel
// not resolved for target yet; a failure is logged and recorded as an
// Event, and the Jobs then ask the API themselves. After a failure it
// tries the same target again only pollRetry later (mono is this pass's
// monotonic time): every pass would otherwise ask the API again (and read
// the Secret), on each Node event of a rollout, and its Warnings would
// spend the recorder's allowance for the channel (25, then one per five
// minutes), so that the controller's next Warnings on it were dropped.
func (ctl *Controller) resolveOnce(ctx context.Context, fc *fleetCache, ch *v1.UpdateChannel, s plan.Settings, mono time.Time) *v1.ResolvedRelease {
	target := plan.Target(s, ch.Status)
	if !fc.resolveFailed.due(target, mono) {
		return nil
	}
	rel, err := ctl.resolveRelease(ctx, ch, s, target)
	if err != nil {
		fc.resolveFailed = resolveAttempt{target: target, at: mono}
		ctl.log.Warn("could not resolve the release once for the rollout; its Jobs ask the API themselves", "channel", ch.Name, "err", err, "retry", pollRetry)
		ctl.recorder.Eventf(ch, "Warning", "ResolveFailed", "could not resolve release %s once for the rollout (its Jobs ask the API themselves; tried again in %s): %v", target, pollRetry, err)
		return nil
	}
	fc.resolveFailed = resolveAttempt{}
	return rel
}

// resolveAttempt is a failed resolution: of which target, and when (on
// the monotonic clock).
type resolveAttempt struct {
	target string
	at     time.Time
}

// due reports whether target may be resolved at mono after the failure a:
// at once for another target (a new version), else pollRetry after it.
func (a resolveAttempt) due(target string, mono time.Time) bool {
	return a.target != target || mono.Sub(a.at) >= pollRetry
}

package channel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-github/v84/github"
)

// gitHub reads releases of owner/repo through the GitHub API: a version is
// a release tag and an artifact is an asset of that release.
type gitHub struct {
	owner, repo string
	api         *github.Client
	download    *http.Client // follows the asset redirect; carries no token
	hasToken    bool
}

func newGitHub(owner, repo string, opts Options) (*gitHub, error) {
	api := github.NewClient(opts.HTTPClient)
	if opts.GitHubToken != "" {
		api = api.WithAuthToken(opts.GitHubToken)
	}
	if opts.GitHubBaseURL != "" {
		base, err := url.Parse(opts.GitHubBaseURL)
		if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
			return nil, fmt.Errorf("GitHub API base URL %q: want http(s)://host/path/", opts.GitHubBaseURL)
		}
		if !strings.HasSuffix(base.Path, "/") {
			base.Path += "/"
		}
		api.BaseURL = base
	}
	api.UserAgent = opts.UserAgent
	return &gitHub{owner: owner, repo: repo, api: api, download: downloadClient(opts.HTTPClient), hasToken: opts.GitHubToken != ""}, nil
}

func (g *gitHub) String() string { return "github-releases://" + g.owner + "/" + g.repo }

// Latest returns the tag of the latest release (GitHub's choice: the newest
// release that is neither a draft nor a prerelease).
func (g *gitHub) Latest(ctx context.Context) (string, error) {
	rel, _, err := g.api.Repositories.GetLatestRelease(ctx, g.owner, g.repo)
	if err != nil {
		return "", g.explain(err, "latest release", "check that the repository exists and has a published, non-prerelease release")
	}
	tag := rel.GetTagName()
	if err := checkVersion(tag); err != nil {
		return "", fmt.Errorf("%s: latest release tag: %w", g, err)
	}
	return tag, nil
}

// Open finds the release tagged version and downloads its asset named artifact.
func (g *gitHub) Open(ctx context.Context, version, artifact string) (io.ReadCloser, int64, error) {
	if err := checkVersionArtifact(version, artifact); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", g, err)
	}
	rel, _, err := g.api.Repositories.GetReleaseByTag(ctx, g.owner, g.repo, version)
	if err != nil {
		return nil, 0, g.explain(err, "release "+version, "check the version: it must be the tag of a published release")
	}
	asset, err := g.findAsset(ctx, rel, artifact)
	if err != nil {
		return nil, 0, err
	}
	rc, _, err := g.api.Repositories.DownloadReleaseAsset(ctx, g.owner, g.repo, asset.GetID(), g.download)
	if err != nil {
		return nil, 0, g.explain(err, "download "+artifact+" of "+version, "check that the asset still exists")
	}
	size := int64(asset.GetSize())
	return newSizedReader(rc, size, fmt.Sprintf("%s %s/%s", g, version, artifact)), size, nil
}

// findAsset looks for an asset by exact name in the release, paging through
// the assets API when the release lists more than it embeds.
func (g *gitHub) findAsset(ctx context.Context, rel *github.RepositoryRelease, name string) (*github.ReleaseAsset, error) {
	var names []string
	for _, a := range rel.Assets {
		if a.GetName() == name {
			return a, nil
		}
		names = append(names, a.GetName())
	}
	if len(rel.Assets) > 0 && len(rel.Assets) < 100 {
		return nil, g.missingAsset(rel, name, names)
	}
	names = names[:0]
	opts := &github.ListOptions{PerPage: 100}
	for {
		assets, resp, err := g.api.Repositories.ListReleaseAssets(ctx, g.owner, g.repo, rel.GetID(), opts)
		if err != nil {
			return nil, g.explain(err, "assets of "+rel.GetTagName(), "check the release")
		}
		for _, a := range assets {
			if a.GetName() == name {
				return a, nil
			}
			names = append(names, a.GetName())
		}
		if resp.NextPage == 0 {
			return nil, g.missingAsset(rel, name, names)
		}
		opts.Page = resp.NextPage
	}
}

func (g *gitHub) missingAsset(rel *github.RepositoryRelease, name string, names []string) error {
	have := "none"
	if len(names) > 0 {
		if len(names) > 10 {
			names = append(names[:10:10], fmt.Sprintf("and %d more", len(names)-10))
		}
		have = strings.Join(names, ", ")
	}
	return fmt.Errorf("%s: release %s has no asset named %s (assets: %s); check the artifact name and architecture: %w",
		g, rel.GetTagName(), name, have, ErrNotFound)
}

// explain turns a go-github error into one that says what to do.
func (g *gitHub) explain(err error, what, hint string) error {
	var rle *github.RateLimitError
	var abuse *github.AbuseRateLimitError
	var resp *github.ErrorResponse
	switch {
	case errors.As(err, &rle):
		reset := rle.Rate.Reset.Time
		return fmt.Errorf("%s: %s: GitHub API rate limit of %d requests per hour exhausted; it resets at %s (in %s); %s: %w",
			g, what, rle.Rate.Limit, reset.UTC().Format(time.RFC3339), until(reset), g.tokenHint(), err)
	case errors.As(err, &abuse):
		wait := "a few minutes"
		if d := abuse.GetRetryAfter(); d > 0 {
			wait = d.String() + " (at " + time.Now().Add(d).UTC().Format(time.RFC3339) + ")"
		}
		return fmt.Errorf("%s: %s: GitHub secondary rate limit hit; retry after %s; %s: %w", g, what, wait, g.tokenHint(), err)
	case errors.As(err, &resp) && resp.Response != nil:
		switch resp.Response.StatusCode {
		case http.StatusNotFound:
			if !g.hasToken {
				hint += " (a private repository needs GITHUB_TOKEN)"
			}
			return fmt.Errorf("%s: %s not found; %s: %w", g, what, hint, ErrNotFound)
		case http.StatusUnauthorized:
			return fmt.Errorf("%s: %s: GitHub rejected the token; check GITHUB_TOKEN: %w", g, what, err)
		}
	}
	return fmt.Errorf("%s: %s: %w", g, what, err)
}

func (g *gitHub) tokenHint() string {
	if g.hasToken {
		return "wait for the reset, or serve the releases from a mirror"
	}
	return "set GITHUB_TOKEN to a GitHub token for a higher limit (5000 requests per hour), or serve the releases from a mirror"
}

// until is the time left before t, rounded to seconds and never negative.
func until(t time.Time) time.Duration {
	d := time.Until(t).Round(time.Second)
	if d < 0 {
		return 0
	}
	return d
}

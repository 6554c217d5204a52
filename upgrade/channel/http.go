package channel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"

	"slipway.dev/slipway/upgrade/channel/channelurl"
)

// maxLatestHops bounds the redirects followed while they still end in /latest
// (for example http to https) before one names a version.
const maxLatestHops = 5

// httpSource follows the system-upgrade-controller convention: .../latest
// redirects to .../<version> and artifacts are at .../download/<version>/<name>.
type httpSource struct {
	latest, base *url.URL
	client       *http.Client // for .../latest
	download     *http.Client // for artifacts: stored bytes, never decoded
	userAgent    string
}

func newHTTPSource(t channelurl.Target, opts Options) *httpSource {
	return &httpSource{latest: t.Latest, base: t.Base, client: opts.HTTPClient,
		download: downloadClient(opts.HTTPClient), userAgent: opts.UserAgent}
}

func (h *httpSource) String() string { return "channel " + withoutUser(h.latest) }

// withoutUser prints u without credentials.
func withoutUser(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// Latest asks .../latest without following its redirect: the redirect
// target's last path segment is the version. A 200 answer holding a single
// version token (a static mirror's latest file) is accepted too.
func (h *httpSource) Latest(ctx context.Context) (string, error) {
	noFollow := *h.client
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	u := h.latest
	for range maxLatestHops {
		v, next, err := h.latestHop(ctx, &noFollow, u)
		if err != nil || next == nil {
			return v, err
		}
		u = next
	}
	return "", fmt.Errorf("%s: more than %d redirects ending in /latest; check the channel URL", h, maxLatestHops)
}

// latestHop does one request; it returns the version, or the next URL when
// the redirect points at another .../latest.
func (h *httpSource) latestHop(ctx context.Context, c *http.Client, u *url.URL) (string, *url.URL, error) {
	resp, err := h.get(ctx, c, u)
	if err != nil {
		return "", nil, fmt.Errorf("%s: resolve latest: %w", h, err)
	}
	defer resp.Body.Close()
	switch code := resp.StatusCode; {
	case isRedirect(code):
		loc, err := resp.Location()
		if err != nil {
			return "", nil, fmt.Errorf("%s: %s answered %s without a usable Location: %w", h, withoutUser(u), resp.Status, err)
		}
		if lastSegment(loc.Path) == "latest" {
			return "", loc, nil
		}
		if strings.TrimRight(loc.Path, "/") == strings.TrimRight(h.base.Path, "/") {
			// GitHub sends .../releases/latest to .../releases when there is none.
			return "", nil, fmt.Errorf("%s: latest redirects to %s: the channel has no release yet: %w", h, withoutUser(loc), ErrNotFound)
		}
		v, err := versionFromLocation(loc)
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", h, err)
		}
		slog.DebugContext(ctx, "channel latest", "channel", h.String(), "redirect", withoutUser(loc), "version", v)
		return v, nil, nil
	case code == http.StatusOK:
		body, err := io.ReadAll(io.LimitReader(resp.Body, 256))
		if err != nil {
			return "", nil, fmt.Errorf("%s: read %s: %w", h, withoutUser(u), err)
		}
		v := strings.TrimSpace(string(body))
		if err := checkVersion(v); err != nil {
			return "", nil, fmt.Errorf("%s: %s answered 200 instead of redirecting to the latest version, and its body is not a version: %w; point the channel at a URL that redirects to .../<version>", h, withoutUser(u), err)
		}
		return v, nil, nil
	case code == http.StatusNotFound:
		return "", nil, fmt.Errorf("%s: %s answered 404: check the channel URL: %w", h, withoutUser(u), ErrNotFound)
	default:
		return "", nil, fmt.Errorf("%s: %s answered %s; check the URL and the server", h, withoutUser(u), resp.Status)
	}
}

// versionFromLocation takes the version from a redirect target such as
// .../releases/tag/v1.2.3 or .../v1.2.3.
func versionFromLocation(loc *url.URL) (string, error) {
	v := lastSegment(loc.Path)
	if err := checkVersion(v); err != nil {
		return "", fmt.Errorf("latest redirects to %s, whose last path segment is not a version: %w", withoutUser(loc), err)
	}
	return v, nil
}

func lastSegment(p string) string { return path.Base(strings.TrimRight(p, "/")) }

func isRedirect(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// Open downloads <base>/download/<version>/<artifact>, following redirects.
func (h *httpSource) Open(ctx context.Context, version, artifact string) (io.ReadCloser, int64, error) {
	if err := checkVersionArtifact(version, artifact); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", h, err)
	}
	u := h.artifactURL(version, artifact)
	slog.DebugContext(ctx, "channel download", "url", withoutUser(u))
	resp, err := h.get(ctx, h.download, u)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: download %s: %w", h, artifact, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return newSizedReader(resp.Body, resp.ContentLength, withoutUser(u)), resp.ContentLength, nil
	case http.StatusNotFound:
		resp.Body.Close()
		return nil, 0, fmt.Errorf("%s: artifact %s of version %s not found at %s: check the version and that the release publishes that artifact: %w",
			h, artifact, version, withoutUser(u), ErrNotFound)
	default:
		resp.Body.Close()
		return nil, 0, fmt.Errorf("%s: download %s answered %s; check the server", h, withoutUser(u), resp.Status)
	}
}

func (h *httpSource) artifactURL(version, artifact string) *url.URL {
	u := *h.base
	u.RawPath = ""
	u.Path = strings.TrimRight(u.Path, "/") + "/download/" + version + "/" + artifact
	return &u
}

func (h *httpSource) get(ctx context.Context, c *http.Client, u *url.URL) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", h.userAgent)
	resp, err := c.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			uerr.URL = withoutUser(u) // keep passwords out of messages
		}
		return nil, err
	}
	return resp, nil
}

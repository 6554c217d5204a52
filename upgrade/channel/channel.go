// Package channel resolves release channels: it finds the newest version a
// channel offers and opens the artifacts of a version.
//
// A channel is named by a URL and served by one of three sources:
//
//   - a mirror directory, given as a plain path or a file:// URL, laid out as
//     <dir>/<version>/<artifact> with a `latest` file (holding the version) or
//     a `latest` symlink to a version directory;
//   - an http(s) URL following the system-upgrade-controller convention:
//     GET .../latest redirects to .../<version> (or .../tag/<version>), and
//     artifacts live under .../download/<version>/<artifact>;
//   - github-releases://owner/repo, read through the GitHub releases API.
//
// New picks the source; ValidateURL checks a URL without any I/O.
package channel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"slipway.dev/slipway/upgrade/channel/channelurl"
)

// Source is a release channel.
type Source interface {
	// Latest returns the newest version the channel offers.
	Latest(ctx context.Context) (string, error)
	// Open returns the content of an artifact of a version and its size in
	// bytes (-1 when unknown). A read that ends early returns an error.
	Open(ctx context.Context, version, artifact string) (io.ReadCloser, int64, error)
	// String describes the channel for messages; it never holds secrets.
	String() string
}

// Options tune how sources reach their channel.
type Options struct {
	// HTTPClient is used for http(s) and GitHub requests; nil means a client
	// with a response-header timeout and the proxy settings of the environment.
	HTTPClient *http.Client
	// GitHubToken authenticates GitHub API requests (higher rate limits,
	// private repositories). The command layer reads it from GITHUB_TOKEN.
	GitHubToken string
	// GitHubBaseURL replaces https://api.github.com/ (GitHub Enterprise, tests).
	GitHubBaseURL string
	// UserAgent is sent with every HTTP request; "" means "slipway".
	UserAgent string
}

// ErrNotFound is wrapped by errors for an unknown version or a missing artifact.
var ErrNotFound = errors.New("not found")

const defaultUserAgent = "slipway"

// New returns the source for rawURL: a mirror directory (plain path or
// file://), an http(s) channel, or github-releases://owner/repo.
func New(rawURL string, opts Options) (Source, error) {
	t, err := channelurl.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if opts.UserAgent == "" {
		opts.UserAgent = defaultUserAgent
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = defaultHTTPClient()
	}
	switch t.Kind {
	case channelurl.Mirror:
		return newMirror(t.Dir), nil
	case channelurl.HTTP:
		return newHTTPSource(t, opts), nil
	default:
		return newGitHub(t.Owner, t.Repo, opts)
	}
}

// ValidateURL checks the syntax and scheme of a channel URL without any I/O.
func ValidateURL(rawURL string) error { return channelurl.Validate(rawURL) }

func defaultHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = time.Minute
	return &http.Client{Transport: tr}
}

// checkName rejects a version or artifact name that could leave its
// directory or URL path segment.
func checkName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty %s name", kind)
	case name == "." || name == "..":
		return fmt.Errorf("%s name %q is not allowed", kind, name)
	case strings.ContainsAny(name, "/\\\x00"):
		return fmt.Errorf("%s name %q must not contain a slash, backslash or NUL", kind, name)
	case strings.TrimSpace(name) != name || strings.ContainsAny(name, "\r\n\t"):
		return fmt.Errorf("%s name %q must not contain white space at its ends or line breaks", kind, name)
	}
	return nil
}

// versionRE is what a resolved version must look like: one token of at
// most maxVersionLen characters, no path characters (v1.2.3,
// v0.22.2-k3s1r0, v1.28.5+k3s1). The length is checked apart: a counted
// repetition compiles into a regexp program as long as its count, built at
// every start of the binary.
var versionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+~-]*$`)

const maxVersionLen = 128

// checkVersion validates a version read from a channel.
func checkVersion(v string) error {
	if len(v) > maxVersionLen || !versionRE.MatchString(v) || v == "latest" {
		return fmt.Errorf("%q is not a version (expected one token such as v1.2.3)", v)
	}
	return nil
}

// checkVersionArtifact validates the arguments of Open.
func checkVersionArtifact(version, artifact string) error {
	if version == "latest" {
		return errors.New(`version "latest" must be resolved with Latest before opening artifacts`)
	}
	if err := checkName("version", version); err != nil {
		return err
	}
	return checkName("artifact", artifact)
}

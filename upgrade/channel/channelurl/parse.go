// Package channelurl parses release channel URLs (a mirror directory,
// http(s)://…/latest, github-releases://owner/repo) without any I/O and
// without the clients that read them, so that decision code can check a
// spec's URL; package channel opens them.
package channelurl

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// Kind is what a channel URL names.
type Kind int

const (
	Mirror Kind = iota // a directory (a path or file:///path)
	HTTP               // an http(s) channel whose .../latest redirects to the newest release
	GitHub             // github-releases://owner/repo
)

// supportedSchemes is listed in errors about unknown schemes.
const supportedSchemes = "a plain directory path, file://, http://, https://, github-releases://owner/repo"

// Target is a parsed channel URL.
type Target struct {
	Kind Kind
	Dir  string // mirror directory

	Latest *url.URL // http: URL whose redirect names the latest version
	Base   *url.URL // http: artifacts are under base/download/<version>/

	Owner, Repo string // github
}

// GitHub's rules for owner (at most 39 characters) and repository names
// (at most 100); lengths are checked apart, as for versionRE.
var (
	githubOwnerRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*$`)
	githubRepoRE  = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
)

const maxOwnerLen, maxRepoLen = 39, 100

// Parse classifies a channel URL. A string without "://" that does not
// start with "file:" is a directory path.
func Parse(raw string) (Target, error) {
	if strings.TrimSpace(raw) == "" {
		return Target{}, errors.New("empty channel URL: give a mirror directory or an http(s):// or github-releases:// URL")
	}
	if !strings.Contains(raw, "://") && !strings.HasPrefix(raw, "file:") {
		return Target{Kind: Mirror, Dir: filepath.Clean(raw)}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Target{}, fmt.Errorf("channel URL %q: %w", raw, err)
	}
	switch strings.ToLower(u.Scheme) {
	case "file":
		return parseFile(u)
	case "http", "https":
		return parseHTTP(u)
	case "github-releases":
		return parseGitHub(u)
	default:
		return Target{}, fmt.Errorf("channel URL %q: unsupported scheme %q; use %s", u.Redacted(), u.Scheme, supportedSchemes)
	}
}

func parseFile(u *url.URL) (Target, error) {
	if u.Host != "" && u.Host != "localhost" {
		return Target{}, fmt.Errorf("channel URL %q: a file URL names a local directory, write file:///absolute/path (host %q is not allowed)", u.String(), u.Host)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return Target{}, fmt.Errorf("channel URL %q: a file URL takes no query or fragment", u.String())
	}
	p := u.Path
	if p == "" {
		p = u.Opaque // file:relative/dir
	}
	if p == "" {
		return Target{}, fmt.Errorf("channel URL %q: no directory given; write file:///path/to/mirror", u.String())
	}
	return Target{Kind: Mirror, Dir: filepath.Clean(filepath.FromSlash(p))}, nil
}

func parseHTTP(u *url.URL) (Target, error) {
	if u.Host == "" || u.Hostname() == "" {
		return Target{}, fmt.Errorf("channel URL %q: no host; write %s://host/path/latest", u.Redacted(), u.Scheme)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return Target{}, fmt.Errorf("channel URL %q: query strings and fragments are not supported; name the .../latest URL itself", u.Redacted())
	}
	if u.Opaque != "" {
		return Target{}, fmt.Errorf("channel URL %q: malformed http URL", u.Redacted())
	}
	p := strings.TrimRight(u.Path, "/")
	base := *u
	base.RawPath = ""
	latest := base
	if path.Base(p) == "latest" {
		base.Path = strings.TrimSuffix(p, "/latest")
		latest.Path = p
	} else {
		// No /latest suffix: the URL is the base of the channel (for example
		// https://github.com/o/r/releases) and its latest is <base>/latest.
		base.Path = p
		latest.Path = p + "/latest"
	}
	return Target{Kind: HTTP, Base: &base, Latest: &latest}, nil
}

func parseGitHub(u *url.URL) (Target, error) {
	const form = "write github-releases://owner/repo"
	if u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" {
		return Target{}, fmt.Errorf("channel URL %q: only owner and repo are allowed; %s", u.Redacted(), form)
	}
	owner := u.Host
	repo := strings.Trim(u.Path, "/")
	if owner == "" || repo == "" || strings.Contains(repo, "/") {
		return Target{}, fmt.Errorf("channel URL %q: %s", u.Redacted(), form)
	}
	if len(owner) > maxOwnerLen || !githubOwnerRE.MatchString(owner) {
		return Target{}, fmt.Errorf("channel URL %q: %q is not a GitHub owner name; %s", u.Redacted(), owner, form)
	}
	if len(repo) > maxRepoLen || !githubRepoRE.MatchString(repo) || repo == "." || repo == ".." {
		return Target{}, fmt.Errorf("channel URL %q: %q is not a GitHub repository name; %s", u.Redacted(), repo, form)
	}
	return Target{Kind: GitHub, Owner: owner, Repo: repo}, nil
}

// Validate checks the syntax and scheme of a channel URL without any I/O.
func Validate(raw string) error {
	_, err := Parse(raw)
	return err
}

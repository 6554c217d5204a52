package channel

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

type kind int

const (
	kindMirror kind = iota
	kindHTTP
	kindGitHub
)

// supportedSchemes is listed in errors about unknown schemes.
const supportedSchemes = "a plain directory path, file://, http://, https://, github-releases://owner/repo"

// target is a parsed channel URL.
type target struct {
	kind kind
	dir  string // mirror directory

	latest *url.URL // http: URL whose redirect names the latest version
	base   *url.URL // http: artifacts are under base/download/<version>/

	owner, repo string // github
}

// GitHub's rules for owner (at most 39 characters) and repository names
// (at most 100); lengths are checked apart, as for versionRE.
var (
	githubOwnerRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*$`)
	githubRepoRE  = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
)

const maxOwnerLen, maxRepoLen = 39, 100

// parse classifies a channel URL. A string without "://" that does not
// start with "file:" is a directory path.
func parse(raw string) (target, error) {
	if strings.TrimSpace(raw) == "" {
		return target{}, errors.New("empty channel URL: give a mirror directory or an http(s):// or github-releases:// URL")
	}
	if !strings.Contains(raw, "://") && !strings.HasPrefix(raw, "file:") {
		return target{kind: kindMirror, dir: filepath.Clean(raw)}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return target{}, fmt.Errorf("channel URL %q: %w", raw, err)
	}
	switch strings.ToLower(u.Scheme) {
	case "file":
		return parseFile(u)
	case "http", "https":
		return parseHTTP(u)
	case "github-releases":
		return parseGitHub(u)
	default:
		return target{}, fmt.Errorf("channel URL %q: unsupported scheme %q; use %s", u.Redacted(), u.Scheme, supportedSchemes)
	}
}

func parseFile(u *url.URL) (target, error) {
	if u.Host != "" && u.Host != "localhost" {
		return target{}, fmt.Errorf("channel URL %q: a file URL names a local directory, write file:///absolute/path (host %q is not allowed)", u.String(), u.Host)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return target{}, fmt.Errorf("channel URL %q: a file URL takes no query or fragment", u.String())
	}
	p := u.Path
	if p == "" {
		p = u.Opaque // file:relative/dir
	}
	if p == "" {
		return target{}, fmt.Errorf("channel URL %q: no directory given; write file:///path/to/mirror", u.String())
	}
	return target{kind: kindMirror, dir: filepath.Clean(filepath.FromSlash(p))}, nil
}

func parseHTTP(u *url.URL) (target, error) {
	if u.Host == "" || u.Hostname() == "" {
		return target{}, fmt.Errorf("channel URL %q: no host; write %s://host/path/latest", u.Redacted(), u.Scheme)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return target{}, fmt.Errorf("channel URL %q: query strings and fragments are not supported; name the .../latest URL itself", u.Redacted())
	}
	if u.Opaque != "" {
		return target{}, fmt.Errorf("channel URL %q: malformed http URL", u.Redacted())
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
	return target{kind: kindHTTP, base: &base, latest: &latest}, nil
}

func parseGitHub(u *url.URL) (target, error) {
	const form = "write github-releases://owner/repo"
	if u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" {
		return target{}, fmt.Errorf("channel URL %q: only owner and repo are allowed; %s", u.Redacted(), form)
	}
	owner := u.Host
	repo := strings.Trim(u.Path, "/")
	if owner == "" || repo == "" || strings.Contains(repo, "/") {
		return target{}, fmt.Errorf("channel URL %q: %s", u.Redacted(), form)
	}
	if len(owner) > maxOwnerLen || !githubOwnerRE.MatchString(owner) {
		return target{}, fmt.Errorf("channel URL %q: %q is not a GitHub owner name; %s", u.Redacted(), owner, form)
	}
	if len(repo) > maxRepoLen || !githubRepoRE.MatchString(repo) || repo == "." || repo == ".." {
		return target{}, fmt.Errorf("channel URL %q: %q is not a GitHub repository name; %s", u.Redacted(), repo, form)
	}
	return target{kind: kindGitHub, owner: owner, repo: repo}, nil
}

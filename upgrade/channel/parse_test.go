package channel

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		raw                   string
		kind                  kind
		dir, latest, base     string
		owner, repo, errMatch string
	}{
		{raw: "/srv/mirror", kind: kindMirror, dir: "/srv/mirror"},
		{raw: "/srv/mirror/", kind: kindMirror, dir: "/srv/mirror"},
		{raw: "relative/mirror", kind: kindMirror, dir: "relative/mirror"},
		{raw: "mirror:with-colon", kind: kindMirror, dir: "mirror:with-colon"},
		{raw: "file:///srv/mirror", kind: kindMirror, dir: "/srv/mirror"},
		{raw: "file://localhost/srv/mirror", kind: kindMirror, dir: "/srv/mirror"},
		{raw: "file:/srv/mirror", kind: kindMirror, dir: "/srv/mirror"},
		{raw: "file://srv/mirror", errMatch: "file:///absolute/path"},
		{raw: "file://", errMatch: "no directory"},
		{raw: "file:///srv/m?x=1", errMatch: "no query"},
		{raw: "https://github.com/rancher/k3os/releases/latest", kind: kindHTTP,
			latest: "https://github.com/rancher/k3os/releases/latest", base: "https://github.com/rancher/k3os/releases"},
		{raw: "https://github.com/rancher/k3os/releases/latest/", kind: kindHTTP,
			latest: "https://github.com/rancher/k3os/releases/latest", base: "https://github.com/rancher/k3os/releases"},
		{raw: "https://github.com/rancher/k3os/releases", kind: kindHTTP,
			latest: "https://github.com/rancher/k3os/releases/latest", base: "https://github.com/rancher/k3os/releases"},
		{raw: "http://10.0.0.1:8080/latest", kind: kindHTTP, latest: "http://10.0.0.1:8080/latest", base: "http://10.0.0.1:8080"},
		{raw: "http://10.0.0.1:8080", kind: kindHTTP, latest: "http://10.0.0.1:8080/latest", base: "http://10.0.0.1:8080"},
		{raw: "HTTPS://example.com/x/latest", kind: kindHTTP, latest: "https://example.com/x/latest", base: "https://example.com/x"},
		{raw: "https://example.com/notlatest", kind: kindHTTP, latest: "https://example.com/notlatest/latest", base: "https://example.com/notlatest"},
		{raw: "https:///no-host/latest", errMatch: "no host"},
		{raw: "https://example.com/latest?token=1", errMatch: "query"},
		{raw: "https://example.com/latest#frag", errMatch: "fragment"},
		{raw: "https://exa mple.com/latest", errMatch: "invalid character"},
		{raw: "github-releases://rancher/k3os", kind: kindGitHub, owner: "rancher", repo: "k3os"},
		{raw: "github-releases://rancher/k3os/", kind: kindGitHub, owner: "rancher", repo: "k3os"},
		{raw: "github-releases://" + strings.Repeat("o", 39) + "/" + strings.Repeat("r", 100), kind: kindGitHub,
			owner: strings.Repeat("o", 39), repo: strings.Repeat("r", 100)},
		{raw: "github-releases://" + strings.Repeat("o", 40) + "/k3os", errMatch: "owner"},
		{raw: "github-releases://rancher/" + strings.Repeat("r", 101), errMatch: "repo"},
		{raw: "github-releases://rancher/system-upgrade.controller", kind: kindGitHub, owner: "rancher", repo: "system-upgrade.controller"},
		{raw: "github-releases://k3s-io", errMatch: "github-releases://owner/repo"},
		{raw: "github-releases://rancher/k3os/extra", errMatch: "github-releases://owner/repo"},
		{raw: "github-releases:///k3os", errMatch: "github-releases://owner/repo"},
		{raw: "github-releases://bad_owner/k3os", errMatch: "not a GitHub owner"},
		{raw: "github-releases://o/re%20po", errMatch: "not a GitHub repository"},
		{raw: "github-releases://user:pw@o/r", errMatch: "only owner and repo"},
		{raw: "ftp://example.com/latest", errMatch: "unsupported scheme \"ftp\"; use a plain directory path, file://, http://, https://, github-releases://"},
		{raw: "s3://bucket/x", errMatch: "unsupported scheme"},
		{raw: "", errMatch: "empty channel URL"},
		{raw: "   ", errMatch: "empty channel URL"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			got, err := parse(tt.raw)
			if tt.errMatch != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errMatch) {
					t.Fatalf("parse(%q) error = %v, want one containing %q", tt.raw, err, tt.errMatch)
				}
				if ValidateURL(tt.raw) == nil {
					t.Fatalf("ValidateURL(%q) accepted what parse rejects", tt.raw)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse(%q): %v", tt.raw, err)
			}
			if got.kind != tt.kind || got.dir != tt.dir || got.owner != tt.owner || got.repo != tt.repo {
				t.Fatalf("parse(%q) = %+v", tt.raw, got)
			}
			if tt.kind == kindHTTP && (got.latest.String() != tt.latest || got.base.String() != tt.base) {
				t.Fatalf("parse(%q): latest %s base %s, want %s and %s", tt.raw, got.latest, got.base, tt.latest, tt.base)
			}
		})
	}
}

func TestCheckVersionArtifact(t *testing.T) {
	tests := []struct {
		version, artifact string
		ok                bool
	}{
		{"v1.2.3", "k3os-rootfs-amd64.tar.gz", true},
		{"v1.28.5+k3s1", "k3s-amd64", true},
		{"latest", "x", false},
		{"", "x", false},
		{"..", "x", false},
		{"v1/../../etc", "x", false},
		{"v1", "../passwd", false},
		{"v1", "a\\b", false},
		{"v1", " x", false},
		{"v1", "", false},
		{"v1", "x\n", false},
	}
	for _, tt := range tests {
		err := checkVersionArtifact(tt.version, tt.artifact)
		if (err == nil) != tt.ok {
			t.Errorf("checkVersionArtifact(%q, %q) = %v, want ok=%v", tt.version, tt.artifact, err, tt.ok)
		}
	}
}

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"v0.22.2-k3s1r0": true, "1.0": true, "v1.28.5+k3s1": true,
		"latest": false, "": false, "<html>": false, "v1 v2": false, "-v1": false, ".v1": false,
		"v" + strings.Repeat("1", 127): true, "v" + strings.Repeat("1", 128): false,
	} {
		if err := checkVersion(v); (err == nil) != ok {
			t.Errorf("checkVersion(%q) = %v, want ok=%v", v, err, ok)
		}
	}
}

func TestNewRejectsBadGitHubBaseURL(t *testing.T) {
	if _, err := New("github-releases://o/r", Options{GitHubBaseURL: "ftp://x"}); err == nil {
		t.Fatal("New accepted an ftp GitHub base URL")
	}
}

package channelurl

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		raw                   string
		kind                  Kind
		dir, latest, base     string
		owner, repo, errMatch string
	}{
		{raw: "/srv/mirror", kind: Mirror, dir: "/srv/mirror"},
		{raw: "/srv/mirror/", kind: Mirror, dir: "/srv/mirror"},
		{raw: "relative/mirror", kind: Mirror, dir: "relative/mirror"},
		{raw: "mirror:with-colon", kind: Mirror, dir: "mirror:with-colon"},
		{raw: "file:///srv/mirror", kind: Mirror, dir: "/srv/mirror"},
		{raw: "file://localhost/srv/mirror", kind: Mirror, dir: "/srv/mirror"},
		{raw: "file:/srv/mirror", kind: Mirror, dir: "/srv/mirror"},
		{raw: "file://srv/mirror", errMatch: "file:///absolute/path"},
		{raw: "file://", errMatch: "no directory"},
		{raw: "file:///srv/m?x=1", errMatch: "no query"},
		{raw: "https://github.com/rancher/k3os/releases/latest", kind: HTTP,
			latest: "https://github.com/rancher/k3os/releases/latest", base: "https://github.com/rancher/k3os/releases"},
		{raw: "https://github.com/rancher/k3os/releases/latest/", kind: HTTP,
			latest: "https://github.com/rancher/k3os/releases/latest", base: "https://github.com/rancher/k3os/releases"},
		{raw: "https://github.com/rancher/k3os/releases", kind: HTTP,
			latest: "https://github.com/rancher/k3os/releases/latest", base: "https://github.com/rancher/k3os/releases"},
		{raw: "http://10.0.0.1:8080/latest", kind: HTTP, latest: "http://10.0.0.1:8080/latest", base: "http://10.0.0.1:8080"},
		{raw: "http://10.0.0.1:8080", kind: HTTP, latest: "http://10.0.0.1:8080/latest", base: "http://10.0.0.1:8080"},
		{raw: "HTTPS://example.com/x/latest", kind: HTTP, latest: "https://example.com/x/latest", base: "https://example.com/x"},
		{raw: "https://example.com/notlatest", kind: HTTP, latest: "https://example.com/notlatest/latest", base: "https://example.com/notlatest"},
		{raw: "https:///no-host/latest", errMatch: "no host"},
		{raw: "https://example.com/latest?token=1", errMatch: "query"},
		{raw: "https://example.com/latest#frag", errMatch: "fragment"},
		{raw: "https://exa mple.com/latest", errMatch: "invalid character"},
		{raw: "github-releases://rancher/k3os", kind: GitHub, owner: "rancher", repo: "k3os"},
		{raw: "github-releases://rancher/k3os/", kind: GitHub, owner: "rancher", repo: "k3os"},
		{raw: "github-releases://" + strings.Repeat("o", 39) + "/" + strings.Repeat("r", 100), kind: GitHub,
			owner: strings.Repeat("o", 39), repo: strings.Repeat("r", 100)},
		{raw: "github-releases://" + strings.Repeat("o", 40) + "/k3os", errMatch: "owner"},
		{raw: "github-releases://rancher/" + strings.Repeat("r", 101), errMatch: "repo"},
		{raw: "github-releases://rancher/system-upgrade.controller", kind: GitHub, owner: "rancher", repo: "system-upgrade.controller"},
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
			got, err := Parse(tt.raw)
			if tt.errMatch != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errMatch) {
					t.Fatalf("parse(%q) error = %v, want one containing %q", tt.raw, err, tt.errMatch)
				}
				if Validate(tt.raw) == nil {
					t.Fatalf("Validate(%q) accepted what Parse rejects", tt.raw)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse(%q): %v", tt.raw, err)
			}
			if got.Kind != tt.kind || got.Dir != tt.dir || got.Owner != tt.owner || got.Repo != tt.repo {
				t.Fatalf("parse(%q) = %+v", tt.raw, got)
			}
			if tt.kind == HTTP && (got.Latest.String() != tt.latest || got.Base.String() != tt.base) {
				t.Fatalf("parse(%q): latest %s base %s, want %s and %s", tt.raw, got.Latest, got.Base, tt.latest, tt.base)
			}
		})
	}
}

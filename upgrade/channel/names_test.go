package channel

import (
	"strings"
	"testing"
)

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

package channel

import (
	"strings"
	"testing"
)

// FuzzParse: parse never panics, and what it accepts is usable.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"/srv/m", "file:///srv/m", "file:m", "https://h/p/latest", "http://u:p@h:1/latest/",
		"github-releases://o/r", "github-releases://o/r/x", "ftp://h", "", "https://h/%zz", "http://[::1]:80/latest"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		tg, err := parse(raw)
		if err != nil {
			return
		}
		switch tg.kind {
		case kindMirror:
			if tg.dir == "" {
				t.Fatalf("parse(%q): empty mirror dir", raw)
			}
		case kindHTTP:
			if tg.latest.Host == "" || !strings.HasSuffix(tg.latest.Path, "/latest") {
				t.Fatalf("parse(%q): latest URL %s", raw, tg.latest)
			}
			if _, err := New(raw, Options{}); err != nil {
				t.Fatalf("New(%q) failed after parse accepted it: %v", raw, err)
			}
		case kindGitHub:
			if !githubOwnerRE.MatchString(tg.owner) || !githubRepoRE.MatchString(tg.repo) {
				t.Fatalf("parse(%q): owner %q repo %q", raw, tg.owner, tg.repo)
			}
		}
	})
}

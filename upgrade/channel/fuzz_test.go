package channel

import (
	"strings"
	"testing"

	"slipway.dev/slipway/upgrade/channel/channelurl"
)

// FuzzParse: parse never panics, and what it accepts is usable.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"/srv/m", "file:///srv/m", "file:m", "https://h/p/latest", "http://u:p@h:1/latest/",
		"github-releases://o/r", "github-releases://o/r/x", "ftp://h", "", "https://h/%zz", "http://[::1]:80/latest"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		tg, err := channelurl.Parse(raw)
		if err != nil {
			return
		}
		switch tg.Kind {
		case channelurl.Mirror:
			if tg.Dir == "" {
				t.Fatalf("parse(%q): empty mirror dir", raw)
			}
		case channelurl.HTTP:
			if tg.Latest.Host == "" || !strings.HasSuffix(tg.Latest.Path, "/latest") {
				t.Fatalf("parse(%q): latest URL %s", raw, tg.Latest)
			}
			if _, err := New(raw, Options{}); err != nil {
				t.Fatalf("New(%q) failed after parse accepted it: %v", raw, err)
			}
		case channelurl.GitHub:
			if tg.Owner == "" || tg.Repo == "" || strings.Contains(tg.Repo, "/") {
				t.Fatalf("parse(%q): owner %q repo %q", raw, tg.Owner, tg.Repo)
			}
		}
	})
}

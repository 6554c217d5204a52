// Package version holds the build's identity, set at link time:
//
//	go build -ldflags "-X slipway.dev/slipway/version.Version=v1.2.3 \
//	    -X slipway.dev/slipway/version.Commit=abc123 -X slipway.dev/slipway/version.Date=2026-01-02T03:04:05Z"
//
// scripts/build sets all three from git.
package version

import "fmt"

// Set through -ldflags -X; the defaults mark a development build.
var (
	Version = "v0.0.0-dev"
	Commit  = "unknown"
	Date    = "unknown"
)

// Info is the build identity in a form that prints as text or JSON.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Date    string `json:"date"`
}

// Get returns the build identity.
func Get() Info { return Info{Version: Version, Commit: Commit, Date: Date} }

// String renders the identity on one line, e.g. "v1.2.3 (commit abc123, built 2026-01-02)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s)", i.Version, i.Commit, i.Date)
}

// Package docs holds slipway's documentation (the Markdown files beside
// this one) and the tests that keep it honest: every relative link in
// docs/ and README.md must name a file that exists and, when it names a
// section, a heading of that file.
package docs

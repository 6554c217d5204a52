// Command chartgen writes slipway's Helm charts (charts/<name>) from the
// same renderers as `slipway … manifest`, so that a chart cannot drift from
// its manifest: each manifest is rendered once with sentinel values for the
// settings a chart exposes, and the sentinels are replaced by Helm template
// expressions; the defaults in values.yaml are read from a render with
// default options. scripts/generate runs it (and CI checks the result with
// scripts/generate --check). See docs/install.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: chartgen <charts directory>")
		os.Exit(2)
	}
	for _, c := range Charts() {
		if err := Write(c, os.Args[1]); err != nil {
			fmt.Fprintf(os.Stderr, "chartgen: chart %s: %v\n", c.Name, err)
			os.Exit(1)
		}
	}
}

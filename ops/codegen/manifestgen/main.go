// Command manifestgen writes the operator's default manifest (ops/manifest
// with default options) to the overlay path k3s auto-deploys from.
// scripts/generate runs it after the CRD YAML is regenerated.
package main

import (
	"fmt"
	"os"

	"slipway.dev/slipway/ops/manifest"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: manifestgen <output.yaml>")
		os.Exit(2)
	}
	body, err := manifest.Render(manifest.Options{})
	if err == nil {
		err = os.WriteFile(os.Args[1], body, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "manifestgen:", err)
		os.Exit(1)
	}
}

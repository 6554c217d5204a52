// Command codegen generates the ops.slipway.dev API's code with wrangler's
// controller-gen: deepcopy, list types and scheme registration in ops/apis,
// and the clientset, listers, informers, wrangler controllers and OpenAPI
// definitions under ops/generated. scripts/generate runs it from the ops/
// directory (wrangler copies its output relative to the working directory).
package main

import (
	"fmt"
	"os"

	controllergen "github.com/rancher/wrangler/v3/pkg/controller-gen"
	"github.com/rancher/wrangler/v3/pkg/controller-gen/args"
)

const (
	apisPackage   = "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	outputPackage = "slipway.dev/slipway/ops/generated"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: codegen <boilerplate file>  (run from the ops/ directory; scripts/generate does)")
		os.Exit(2)
	}
	// Types are named, not reflected, so a stale or missing generated file in
	// the API package never stops the generator from building.
	controllergen.Run(args.Options{
		OutputPackage: outputPackage,
		Boilerplate:   os.Args[1],
		Groups: map[string]args.Group{
			"ops.slipway.dev": {
				Types: []interface{}{
					args.Type{Version: "v1", Package: apisPackage, Name: "UpdateChannel"},
				},
				GenerateTypes:     true,
				GenerateClients:   true,
				GenerateListers:   true,
				GenerateInformers: true,
				GenerateOpenAPI:   true,
				OpenAPIDependencies: []string{
					"k8s.io/apimachinery/pkg/apis/meta/v1",
					"k8s.io/apimachinery/pkg/runtime",
					"k8s.io/apimachinery/pkg/version",
				},
			},
		},
	})
}

// Command codegen generates the code of one of slipway's API groups with
// wrangler's controller-gen: deepcopy, list types and scheme registration in
// the group's package under ops/apis, and the clientset, listers, informers,
// wrangler controllers and OpenAPI definitions in the group's own output
// package under ops/generated (one output package per group, so each system
// links only the clients of its own group). scripts/generate runs it once per
// group, from the ops/ directory (wrangler copies its output relative to the
// working directory).
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	controllergen "github.com/rancher/wrangler/v3/pkg/controller-gen"
	"github.com/rancher/wrangler/v3/pkg/controller-gen/args"
)

// api is one API group version and where its generated code goes.
type api struct {
	group   string
	version string
	pkg     string   // Go package of the types
	output  string   // Go package of the generated clients
	types   []string // kinds with a client
	// openAPIDeps are the packages of referenced types beyond the defaults
	// (meta/v1, runtime, version): core/v1 for a pod template, say.
	openAPIDeps []string
}

// apis are slipway's API groups, keyed by the name scripts/generate passes.
// A new group adds an entry here and its name to scripts/generate.
var apis = map[string]api{
	"ops": {
		group: "ops.slipway.dev", version: "v1",
		pkg:    "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1",
		output: "slipway.dev/slipway/ops/generated",
		types:  []string{"UpdateChannel", "NodeUpdate"},
	},
	"swarm": {
		group: "swarm.slipway.dev", version: "v1alpha1",
		pkg:    "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1",
		output: "slipway.dev/slipway/ops/generated/swarm",
		types:  []string{"Swarm"},
	},
	"eds": {
		group: "eds.slipway.dev", version: "v1alpha1",
		pkg:    "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1",
		output: "slipway.dev/slipway/ops/generated/eds",
		types:  []string{"ExtendedDaemonSet", "ExtendedDaemonSetReplicaSet", "ExtendedDaemonsetSetting"},
		// The pod template and resource requirements get their real schemas.
		openAPIDeps: []string{"k8s.io/api/core/v1", "k8s.io/apimachinery/pkg/api/resource", "k8s.io/apimachinery/pkg/util/intstr"},
	},
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintf(os.Stderr, "usage: codegen <boilerplate file> <api: %s>  (run from the ops/ directory; scripts/generate does)\n", names())
		os.Exit(2)
	}
	a, ok := apis[os.Args[2]]
	if !ok {
		fmt.Fprintf(os.Stderr, "codegen: unknown api %q (known: %s)\n", os.Args[2], names())
		os.Exit(2)
	}
	var types []interface{}
	for _, name := range a.types {
		// Types are named, not reflected, so a stale or missing generated file
		// in the API package never stops the generator from building.
		types = append(types, args.Type{Version: a.version, Package: a.pkg, Name: name})
	}
	controllergen.Run(args.Options{
		OutputPackage: a.output,
		Boilerplate:   os.Args[1],
		Groups: map[string]args.Group{
			a.group: {
				Types:             types,
				GenerateTypes:     true,
				GenerateClients:   true,
				GenerateListers:   true,
				GenerateInformers: true,
				GenerateOpenAPI:   true,
				OpenAPIDependencies: append([]string{
					"k8s.io/apimachinery/pkg/apis/meta/v1",
					"k8s.io/apimachinery/pkg/runtime",
					"k8s.io/apimachinery/pkg/version",
				}, a.openAPIDeps...),
			},
		},
	})
}

func names() string {
	var out []string
	for k := range apis {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

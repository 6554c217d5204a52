package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// unlinked are packages the binary must not link. Each registers, or pulls
// in the package that registers, every API group of Kubernetes in
// client-go's scheme at start: linked, they cost about a third of every
// agent's resident memory (the binary's pages touched to initialise them; an
// idle stripped binary: 33 MiB RSS with them, 22 MiB without). ops/kube is
// the client over only the groups slipway uses.
var unlinked = []string{
	"k8s.io/client-go/kubernetes/scheme",
	"k8s.io/client-go/discovery",
	"k8s.io/client-go/informers",
	"k8s.io/client-go/tools/leaderelection",
}

const binary = "slipway.dev/slipway/cmd/slipway"

func TestBinaryDoesNotLinkClientGoScheme(t *testing.T) {
	imports := importGraph(t, binary)
	for _, bad := range unlinked {
		if chain := importChain(imports, binary, bad); chain != nil {
			t.Errorf("the slipway binary links %s (%s); use slipway.dev/slipway/ops/kube's clients instead",
				bad, strings.Join(chain, " -> "))
		}
	}
}

// importGraph is every package root links, with the packages it imports.
func importGraph(t *testing.T, root string) map[string][]string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test runs go list: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, root)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux") // as the binary is built
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		graph[fields[0]] = fields[1:]
	}
	return graph
}

// importChain is a shortest chain of imports from root to pkg (nil when
// root does not link pkg), so a failure names who imports it.
func importChain(graph map[string][]string, root, pkg string) []string {
	from := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == pkg {
			var chain []string
			for ; p != ""; p = from[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		for _, next := range graph[p] {
			if _, seen := from[next]; !seen {
				from[next] = p
				queue = append(queue, next)
			}
		}
	}
	return nil
}

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// runSwarmAssign runs `slipway swarm assign` in-process on stdin and returns
// its stdout and exit status.
func runSwarmAssign(t *testing.T, stdin string, flags ...string) (string, int) {
	t.Helper()
	app := newApp()
	var out bytes.Buffer
	app.Reader, app.Writer, app.ErrWriter = strings.NewReader(stdin), &out, &bytes.Buffer{}
	app.ExitErrHandler = func(*cli.Context, error) {}
	err := app.Run(append([]string{"slipway", "swarm", "assign"}, flags...))
	if err != nil {
		return err.Error(), exitCode(err)
	}
	return out.String(), 0
}

func TestSwarmAssignCommand(t *testing.T) {
	out, code := runSwarmAssign(t, `{"jobs":["c","a","b"],"workers":["w-1","w-0","w-2","w-3"],"previous":{"w-0":["a","b","c"]}}`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var res struct {
		Assignments map[string][]string `json:"assignments"`
		Moved       *int                `json:"moved"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(res.Assignments) != 4 || res.Moved == nil || *res.Moved != 2 {
		t.Errorf("want 4 workers (one empty) and 2 moved, got %s", out)
	}
	if jobs, ok := res.Assignments["w-0"]; !ok || len(jobs) != 1 || !strings.Contains(out, `[]`) {
		t.Errorf("w-0 keeps one job and the idle worker has [], got %s", out)
	}
	for stdin, want := range map[string]string{
		`{"jobs": [`:                         "not an assignment request",
		`{"jobs":["a"]}`:                     `needs both "jobs" and "workers"`,
		`{"jobs":["a","a"],"workers":["w"]}`: `job "a" is listed more than once`,
		`{"jobs":["a"],"workers":["w"],"dedicated":["z"]}`:         `dedicated job "z" is not in the job list`,
		`{"jobs":["a","b"],"workers":["w"],"dedicated":["a","b"]}`: "dedicated jobs need as many workers",
	} {
		msg, code := runSwarmAssign(t, stdin)
		if code != 2 || !strings.Contains(msg, want) {
			t.Errorf("stdin %s: exit %d %q, want exit 2 saying %q", stdin, code, msg, want)
		}
	}
}

func TestSwarmAssignTable(t *testing.T) {
	out, code := runSwarmAssign(t, `{"jobs":["a","b","c"],"workers":["w-1","w-0"],"previous":{"w-0":["a","b","c"]}}`, "-o", "table")
	want := "WORKER  JOBS  LIST\nw-0     2     "
	if code != 0 || !strings.HasPrefix(out, want) || !strings.HasSuffix(out, "moved: 1\n") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
	if _, code := runSwarmAssign(t, `{"jobs":[],"workers":[]}`, "-o", "yaml"); code != 2 {
		t.Errorf("-o yaml: exit %d, want 2", code)
	}
}

func TestSwarmManifestCommand(t *testing.T) {
	app := newApp()
	var out bytes.Buffer
	app.Writer = &out
	if err := app.Run([]string{"slipway", "swarm", "manifest", "--namespace", "streams"}); err != nil {
		t.Fatal(err)
	}
	body := out.String()
	for _, want := range []string{"kind: CustomResourceDefinition", "kind: Role\n", "kind: RoleBinding", "kind: Deployment", "namespace: streams", "- swarm\n        - controller"} {
		if !strings.Contains(body, want) {
			t.Errorf("manifest lacks %q", want)
		}
	}
	if strings.Contains(body, "ClusterRole") {
		t.Error("the swarm manifest grants cluster-wide rights")
	}
}

// The example of docs/swarm.md is what the binary prints.
func TestSwarmAssignDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/swarm.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("echo '(\\{.*\\})' \\| slipway swarm assign\n# (\\{.*\\})\n").FindStringSubmatch(string(doc))
	if m == nil {
		t.Fatal("docs/swarm.md has no `echo '...' | slipway swarm assign` example followed by its output")
	}
	if out, code := runSwarmAssign(t, m[1]); code != 0 || strings.TrimSpace(out) != m[2] {
		t.Errorf("docs/swarm.md says\n%s\nthe binary prints (exit %d)\n%s", m[2], code, out)
	}
}

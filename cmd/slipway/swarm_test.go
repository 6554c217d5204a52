package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// runSwarmAssign runs `slipway swarm assign` in-process on stdin and returns
// its stdout and exit status.
func runSwarmAssign(t *testing.T, stdin string) (string, int) {
	t.Helper()
	app := newApp()
	var out bytes.Buffer
	app.Reader, app.Writer, app.ErrWriter = strings.NewReader(stdin), &out, &bytes.Buffer{}
	app.ExitErrHandler = func(*cli.Context, error) {}
	err := app.Run([]string{"slipway", "swarm", "assign"})
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

package assign

import (
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	in, err := Decode(strings.NewReader(`{"jobs":["a","b"],"workers":[],"previous":{"w":["a"]},"dedicated":["b"]}`))
	if err != nil || len(in.Jobs) != 2 || len(in.Workers) != 0 || in.Previous["w"][0] != "a" || in.Dedicated[0] != "b" {
		t.Fatalf("Decode = %+v, %v", in, err)
	}
	for input, want := range map[string]string{
		``:                                     "no input",
		`[1,2]`:                                "not an assignment request",
		`{"jobs":["a"]}`:                       `needs both "jobs" and "workers"`,
		`{"jobs":["a"],"workers":["w"],"x":1}`: `unknown field "x"`,
		`{"jobs":["a"],"workers":["w"]} {}`:    "data after the JSON object",
		`{"jobs":["a"],"workers":["w"]} x`:     "data after the JSON object",
		`{"jobs":"a","workers":["w"]}`:         "not an assignment request",
	} {
		if _, err := Decode(strings.NewReader(input)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%q) = %v, want an error saying %q", input, err, want)
		}
	}
}

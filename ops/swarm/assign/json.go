package assign

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Decode reads one Input as a JSON object from r:
//
//	{"jobs": [...], "workers": [...], "previous": {"<worker>": [...]}, "dedicated": [...]}
//
// jobs and workers are required (either may be empty); unknown fields and
// trailing data are refused, with a message saying where.
func Decode(r io.Reader) (Input, error) {
	var raw struct {
		Input
		Jobs    *[]string `json:"jobs"`
		Workers *[]string `json:"workers"`
	}
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return Input{}, fmt.Errorf(`no input: pipe one JSON object such as {"jobs": ["a", "b"], "workers": ["w-0"]}`)
		}
		return Input{}, fmt.Errorf("input is not an assignment request: %w", err)
	}
	if dec.More() {
		return Input{}, fmt.Errorf("input has data after the JSON object: pass one object")
	}
	if rest, _ := io.ReadAll(dec.Buffered()); len(bytes.TrimSpace(rest)) > 0 {
		return Input{}, fmt.Errorf("input has data after the JSON object: pass one object")
	}
	if raw.Jobs == nil || raw.Workers == nil {
		return Input{}, fmt.Errorf(`input needs both "jobs" and "workers" (lists of names; either may be empty)`)
	}
	in := raw.Input
	in.Jobs, in.Workers = *raw.Jobs, *raw.Workers
	return in, nil
}

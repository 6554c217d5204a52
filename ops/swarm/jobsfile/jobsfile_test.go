package jobsfile

import (
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestRenderParse(t *testing.T) {
	until := time.Date(2026, 11, 28, 3, 25, 41, 520000000, time.UTC)
	for _, f := range []File{
		{Version: 9, ValidUntil: until, Jobs: []string{"cam-02", "cam-05"}},
		{Version: 0},
		{Version: 3, Jobs: []string{"a"}},
	} {
		got, err := Parse(f.Render())
		if err != nil {
			t.Fatal(err)
		}
		if got.Version != f.Version || !got.ValidUntil.Equal(f.ValidUntil) || !slices.Equal(got.Jobs, f.Jobs) {
			t.Errorf("Parse(Render(%+v)) = %+v", f, got)
		}
	}
	for text, want := range map[string]File{
		"a\nb\n":                     {Jobs: []string{"a", "b"}},
		"# a comment\n\n a \n":       {Jobs: []string{"a"}},
		"# swarm-version: 4\nx\n":    {Version: 4, Jobs: []string{"x"}},
		"#swarm-version:4\n# k: v\n": {Version: 4},
	} {
		got, err := Parse(text)
		if err != nil || got.Version != want.Version || !slices.Equal(got.Jobs, want.Jobs) {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", text, got, err, want)
		}
	}
	for _, bad := range []string{"# swarm-version: x\n", "# swarm-version: -1\n", "# swarm-valid-until: soon\n"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

func TestValid(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		f    File
		want bool
	}{
		{File{}, true},
		{File{ValidUntil: now.Add(time.Second)}, true},
		{File{ValidUntil: now}, false},
		{File{ValidUntil: now.Add(-time.Second)}, false},
	} {
		if got := tc.f.Valid(now); got != tc.want {
			t.Errorf("%+v.Valid = %v, want %v", tc.f, got, tc.want)
		}
	}
}

func TestAck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ack")
	if _, ok := ReadAck(path); ok {
		t.Fatal("an ack read from no file")
	}
	if err := WriteAck(path, 7); err != nil {
		t.Fatal(err)
	}
	if n, ok := ReadAck(path); !ok || n != 7 {
		t.Fatalf("ReadAck = %d, %v; want 7", n, ok)
	}
	for _, tc := range []struct {
		acked, version int64
		want           bool
	}{{7, 7, true}, {0, 7, true}, {6, 7, false}, {8, 7, false}, {0, 0, true}} {
		if got := Confirms(tc.acked, tc.version); got != tc.want {
			t.Errorf("Confirms(%d, %d) = %v", tc.acked, tc.version, got)
		}
	}
}

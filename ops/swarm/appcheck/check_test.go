package appcheck

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestDoubleHeld(t *testing.T) {
	for _, tc := range []struct {
		s    Sample
		want map[string][]string
	}{
		{Sample{}, map[string][]string{}},
		{Sample{"w-0/a": {"x", "y"}, "w-1/b": {"z"}}, map[string][]string{}},
		{Sample{"w-1/b": {"x"}, "w-0/a": {"x", "y"}}, map[string][]string{"x": {"w-0/a", "w-1/b"}}},
		// Two incarnations of one pod are two applications.
		{Sample{"w-0/a": {"x"}, "w-0/c": {"x"}, "w-2/d": {"x", "y"}}, map[string][]string{"x": {"w-0/a", "w-0/c", "w-2/d"}}},
	} {
		if got := DoubleHeld(tc.s); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("DoubleHeld(%v) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestReadReports(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(a, []byte("x\ny\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := ReadReports(map[string]string{"a": a, "b": b})
	if !reflect.DeepEqual(got, Sample{"a": {"x", "y"}}) {
		t.Fatalf("ReadReports = %v", got)
	}
}

package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"10": 10, "64Ki": 64 << 10, "256Mi": 256 << 20, "1Gi": 1 << 30} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1", "1Ti"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q): want an error", bad)
		}
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	if err := run([]string{"-mirror", dir, "-version", "v3", "-arch", "arm64"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "v3", "sha256sum-arm64.txt")); err != nil {
		t.Fatal(err)
	}
}

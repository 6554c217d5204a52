//go:build linux

package boot

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWaitForFileSeesCreation(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "vda")
	errc := make(chan error, 1)
	go func() { errc <- WaitForFile(context.Background(), p, 10*time.Second) }()
	// Create the file once the watcher may or may not be set up: both the
	// initial stat and the event path must end the wait.
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("WaitForFile: %v", err)
	}
}

func TestWaitForFileTimesOut(t *testing.T) {
	err := WaitForFile(context.Background(), filepath.Join(t.TempDir(), "never"), 50*time.Millisecond)
	if err == nil {
		t.Fatal("missing file: want a timeout error")
	}
}

func TestLoadModulesListErrors(t *testing.T) {
	dir := t.TempDir()
	if err := LoadModules(dir); err != nil {
		t.Fatalf("no load.order: %v, want nothing to do", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "load.order"), []byte("# comment\n\nmissing.ko\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := LoadModules(dir); err == nil {
		t.Fatal("listed module missing: want an error")
	}
}

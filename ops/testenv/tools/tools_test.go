package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "etcd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kube-apiserver"), []byte("not executable"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Check(dir, "etcd", "kube-apiserver", "kwok")
	if err == nil || !strings.Contains(err.Error(), "lacks kube-apiserver, kwok") || !strings.Contains(err.Error(), "scripts/install-tools") {
		t.Fatalf("Check: %v, want it to name kube-apiserver and kwok and say what to run", err)
	}
	if err := Check(dir, "etcd"); err != nil {
		t.Fatalf("Check with everything present: %v", err)
	}
}

func TestRepoRootHoldsInstallTools(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "scripts", "install-tools")); err != nil {
		t.Fatalf("RepoRoot %s: %v", root, err)
	}
}

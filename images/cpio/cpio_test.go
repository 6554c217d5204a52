package cpio

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestReadByCpioTool checks the archive with an independent reader when one
// is installed (GNU cpio or busybox), and its framing always.
func TestArchive(t *testing.T) {
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "etc", "hello"), []byte("hi there\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("etc/hello", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.Tree(src); err != nil {
		t.Fatal(err)
	}
	if err := w.File("init", 0o755, []byte("#!/bin/sh\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if len(b)%4 != 0 || !bytes.HasPrefix(b, []byte("070701")) || !bytes.Contains(b, []byte("TRAILER!!!\x00")) {
		t.Fatalf("bad framing: %d bytes, prefix %q", len(b), b[:6])
	}
	tool, err := exec.LookPath("cpio")
	if err != nil {
		t.Fatal("no cpio tool to read the archive back: run scripts/deps")
	}
	out := t.TempDir()
	cmd := exec.Command(tool, "-id", "--quiet")
	cmd.Dir, cmd.Stdin = out, bytes.NewReader(b)
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -id: %v: %s", err, o)
	}
	if got, err := os.ReadFile(filepath.Join(out, "link")); err != nil || string(got) != "hi there\n" {
		t.Fatalf("read back through link: %q, %v", got, err)
	}
	if fi, err := os.Stat(filepath.Join(out, "init")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("init: %v %v", fi, err)
	}
}

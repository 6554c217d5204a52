package reboot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestAfterRunsCommand(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "rebooted")
	if err := After(context.Background(), 10*time.Millisecond, Command{Argv: []string{"touch", mark}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("reboot command did not run: %v", err)
	}
}

func TestAfterCancelled(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "rebooted")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := After(ctx, time.Hour, Command{Argv: []string{"touch", mark}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Fatal("rebooted although cancelled")
	}
}

func TestCommandFails(t *testing.T) {
	if err := (Command{Argv: []string{"false"}}).Reboot(context.Background()); err == nil {
		t.Fatal("want the command's failure")
	}
	if err := (Command{}).Reboot(context.Background()); err == nil {
		t.Fatal("want an error for an empty command")
	}
}

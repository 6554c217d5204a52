package lock

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A helper process holds the lock until its stdin closes.
func TestMain(m *testing.M) {
	if p := os.Getenv("LOCK_TEST_HOLD"); p != "" {
		l, err := Acquire(p, "holder-process")
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("held")
		buf := make([]byte, 1)
		_, _ = os.Stdin.Read(buf)
		_ = l.Release()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func hold(t *testing.T, path string) (*exec.Cmd, func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "LOCK_TEST_HOLD="+path)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil || string(buf[:4]) != "held" {
		t.Fatalf("holder did not take the lock: %q %v", buf, err)
	}
	return cmd, func() { in.Close(); _ = cmd.Wait() }
}

func TestSecondProcessFailsAtOnceNamingHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "upgrade.lock")
	cmd, done := hold(t, path)
	_, err := Acquire(path, "second")
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("err = %v, want ErrLocked", err)
	}
	if want := fmt.Sprintf("pid %d", cmd.Process.Pid); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "holder-process") {
		t.Fatalf("error %q does not name the holder (%s)", err, want)
	}
	done()
	l, err := Acquire(path, "third")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	_ = l.Release()
}

func TestKilledHolderNeverBlocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "upgrade.lock")
	cmd, _ := hold(t, path)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "holder-process") {
		t.Fatalf("lock file should still record the dead holder: %q", b)
	}
	l, err := Acquire(path, "next")
	if err != nil {
		t.Fatalf("lock left by a killed run blocked: %v", err)
	}
	_ = l.Release()
}

func TestEmptyPath(t *testing.T) {
	if _, err := Acquire("", "x"); err == nil {
		t.Fatal("want an error for an empty path")
	}
}

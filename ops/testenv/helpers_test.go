package testenv

import (
	"syscall"
	"testing"
)

// assertGone fails t for every pid that still exists.
func assertGone(t *testing.T, pids map[string]int) {
	t.Helper()
	if len(pids) == 0 {
		t.Fatal("no pids recorded")
	}
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("%s (pid %d) still running after Stop", name, pid)
		}
	}
}

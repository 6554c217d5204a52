package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
)

// TestExecStopsTheWholeGroup: an --exec command that started processes of
// its own (a shell running the application in the background) is stopped
// with all of them when its share changes; before, only the command got
// SIGTERM and what it started ran on with the old jobs.
func TestExecStopsTheWholeGroup(t *testing.T) {
	dir, tmp := t.TempDir(), t.TempDir()
	pidFile := filepath.Join(tmp, "pid")
	mount(t, dir, shareOf([]string{"a"}, 1))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ConfigFile: filepath.Join(dir, swarmv1.ConfigMapKey), PodName: "w-0",
			Exec: []string{"sh", "-c", `sleep 60 & echo "$SWARM_VERSION $!" > ` + pidFile + `; wait`, "sh"}, Poll: time.Hour})
	}()
	defer func() { cancel(); <-done }()
	var child int
	waitUntil(t, "the command's own child started", func() bool {
		f := strings.Fields(read(pidFile))
		if len(f) != 2 || f[0] != "1" {
			return false
		}
		child, _ = strconv.Atoi(f[1])
		return child > 0
	})
	mount(t, dir, shareOf([]string{"b"}, 2))
	waitUntil(t, "the restarted command", func() bool { return strings.HasPrefix(read(pidFile), "2 ") })
	waitUntil(t, "the first command's child stopped", func() bool { return gone(child) })
}

// gone tells whether no process pid runs (a zombie awaiting its reaper
// counts as gone).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] == "Z"
}

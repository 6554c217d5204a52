package worker

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
)

// TestShareVersionNeverGoesBack: a mounted share older than one already
// applied (a volume gone backwards) is refused: its jobs may run elsewhere
// since. Before, any version was applied.
func TestShareVersionNeverGoesBack(t *testing.T) {
	dir, out := t.TempDir(), filepath.Join(t.TempDir(), "jobs")
	mount(t, dir, shareOf([]string{"cam-2"}, 5))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ConfigFile: filepath.Join(dir, swarmv1.ConfigMapKey), PodName: "w-0", Out: out, Poll: 50 * time.Millisecond})
	}()
	defer func() { cancel(); <-done }()
	waitUntil(t, "version 5 running", func() bool { return read(out) == "cam-2\n" })
	mount(t, dir, shareOf([]string{"cam-1", "cam-2"}, 4))
	hold(t, "an older share applied", 500*time.Millisecond, func() bool { return read(out) != "cam-2\n" })
	mount(t, dir, shareOf([]string{"cam-3"}, 6))
	waitUntil(t, "version 6 running", func() bool { return read(out) == "cam-3\n" })
}

package platform_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/ops/updateoperator/platform"
	"slipway.dev/slipway/ops/updateoperator/platform/brapitest"
)

func emulated(t *testing.T) (*brapitest.Server, *platform.Bottlerocket) {
	t.Helper()
	sock := filepath.Join(shortDir(t), "api.sock")
	srv, err := brapitest.New(sock, "1.19.0", "1.20.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv, &platform.Bottlerocket{Socket: sock, Poll: 5 * time.Millisecond, Backoff: 5 * time.Millisecond}
}

// The host API's answers the old agents mishandled, each as the real API
// gives it, and what the agent's platform makes of them.
func TestBottlerocketAnswersAsTheRealAPI(t *testing.T) {
	t.Run("a failed command: its stderr in the error", func(t *testing.T) {
		srv, p := emulated(t)
		c := ctx(t)
		if _, err := p.Check(c); err != nil {
			t.Fatal(err)
		}
		srv.FailNext("prepare", "Failed to write image to disk: No space left on device (os error 28)")
		err := p.Prepare(c)
		if err == nil || !strings.Contains(err.Error(), "No space left on device") || !strings.Contains(err.Error(), "exit status 1") {
			t.Errorf("failed prepare: %v; want the command's stderr and exit status", err)
		}
		if err := p.Prepare(c); err != nil {
			t.Errorf("prepare again after the failure: %v", err)
		}
	})
	t.Run("a staging partition of another version is prepared again, never activated", func(t *testing.T) {
		srv, p := emulated(t)
		c := ctx(t)
		if _, err := p.Check(c); err != nil {
			t.Fatal(err)
		}
		srv.StageOther("1.18.0")
		if err := p.Perform(c); err == nil || !strings.Contains(err.Error(), "1.18.0") {
			t.Errorf("perform with 1.18.0 staged for the chosen 1.20.0: %v; want a refusal naming both", err)
		}
		if srv.State() != "Staged" {
			t.Errorf("the other version was activated: state %s", srv.State())
		}
		if err := p.Prepare(c); err != nil {
			t.Fatal(err)
		}
		if srv.Staged() != "1.20.0" {
			t.Errorf("prepare took the staged %s as done; want the chosen 1.20.0 staged", srv.Staged())
		}
		if err := p.Perform(c); err != nil || srv.State() != "Ready" {
			t.Errorf("perform: %v (state %s)", err, srv.State())
		}
	})
	t.Run("the 404 of a fresh boot: refreshed, not an error", func(t *testing.T) {
		srv, p := emulated(t)
		c := ctx(t)
		srv.Boot()
		if err := p.Reset(c); err != nil {
			t.Errorf("reset right after a boot: %v", err)
		}
		srv.Boot()
		if err := p.Prepare(c); err != nil || srv.Staged() != "1.20.0" {
			t.Errorf("prepare right after a boot: %v (staged %q)", err, srv.Staged())
		}
	})
	t.Run("a fallback boot runs the old version", func(t *testing.T) {
		srv, p := emulated(t)
		c := ctx(t)
		if _, err := p.Check(c); err != nil {
			t.Fatal(err)
		}
		if err := p.Prepare(c); err != nil {
			t.Fatal(err)
		}
		if err := p.Perform(c); err != nil {
			t.Fatal(err)
		}
		srv.FallBack(1)
		if err := p.Reboot(c); err != nil {
			t.Fatal(err)
		}
		if v, err := p.Version(c); err != nil || v != "1.19.0" {
			t.Errorf("after a fallback boot: version %q, %v; want 1.19.0", v, err)
		}
		if st, err := p.Check(c); err != nil || st.Available != "1.20.0" {
			t.Errorf("Check after the fallback = %+v, %v; want 1.20.0 available again", st, err)
		}
	})
	t.Run("a reboot call cut off by the host going down: under way", func(t *testing.T) {
		srv, p := emulated(t)
		srv.ResetOnReboot(true)
		if err := p.Reboot(ctx(t)); err != nil {
			t.Errorf("reboot answered by a closed connection: %v; want it taken as under way", err)
		}
		if srv.Reboots() != 1 {
			t.Errorf("reboots %d, want 1", srv.Reboots())
		}
	})
}

// The host runs each command after answering its POST and holds the
// update lock while it runs: a status read before the command started
// shows the command before it, a read while it runs is a 423. The
// platform waits for the command it sent (never the one before it, a
// failed one included) through both, and the whole update goes through.
func TestBottlerocketAwaitsTheHostsCommand(t *testing.T) {
	srv, p := emulated(t)
	srv.Timing(30*time.Millisecond, 60*time.Millisecond)
	c := ctx(t)
	st, err := p.Check(c)
	if err != nil || st.Available != "1.20.0" {
		t.Fatalf("Check = %+v, %v; want 1.20.0 available", st, err)
	}
	srv.FailNext("prepare", "Failed to write image to disk: No space left on device (os error 28)")
	if err := p.Prepare(c); err == nil || !strings.Contains(err.Error(), "No space left") {
		t.Fatalf("a failed prepare: %v; want its stderr", err)
	}
	if err := p.Prepare(c); err != nil || srv.Staged() != "1.20.0" {
		t.Fatalf("prepare again after the failure (the failure before it is not its result): %v, staged %q", err, srv.Staged())
	}
	if err := p.Perform(c); err != nil || srv.State() != "Ready" {
		t.Fatalf("perform: %v, state %s", err, srv.State())
	}
	if err := p.Reset(c); err != nil || srv.State() != "Staged" {
		t.Fatalf("reset: %v, state %s", err, srv.State())
	}
	if err := p.Perform(c); err != nil {
		t.Fatal(err)
	}
	if err := p.Reboot(c); err != nil {
		t.Fatal(err)
	}
	srv.Boot()
	if st, err := p.Check(c); err != nil || st.Current != "1.20.0" || st.Available != "" {
		t.Errorf("Check after the reboot (its status 404 until a refresh ran) = %+v, %v; want 1.20.0, up to date", st, err)
	}
	if srv.Busy423() == 0 {
		t.Error("no status read met the lock of a running command: the polling path was not taken")
	}
}

// A host that activated an update and has not rebooted reports it as
// staged (the next boot starts it); once deactivated, none.
func TestBottlerocketReportsStaged(t *testing.T) {
	_, p := emulated(t)
	c := ctx(t)
	if _, err := p.Check(c); err != nil {
		t.Fatal(err)
	}
	if err := p.Prepare(c); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Check(c); err != nil || st.Staged != "" {
		t.Errorf("prepared, not activated: Check = %+v, %v; want nothing staged (the next boot is unchanged)", st, err)
	}
	if err := p.Perform(c); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Check(c); err != nil || st.Staged != "1.20.0" || st.Current != "1.19.0" {
		t.Errorf("activated, not booted: Check = %+v, %v; want 1.20.0 staged, 1.19.0 running", st, err)
	}
	if err := p.Reset(c); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Check(c); err != nil || st.Staged != "" {
		t.Errorf("deactivated: Check = %+v, %v; want nothing staged", st, err)
	}
}

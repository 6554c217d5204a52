package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// DefaultAPISocket is where Bottlerocket's host API listens.
const DefaultAPISocket = "/run/api.sock"

// Bottlerocket drives Bottlerocket's host API over its unix socket. A 423
// (another update command holds the lock) is retried with backoff, never
// taken for a failure at once.
type Bottlerocket struct {
	Socket string
	// Poll is how often a command's progress is read (default 1s); Backoff
	// the first wait after a 423 (default 250ms, doubled up to 8s).
	Poll, Backoff time.Duration

	client *http.Client
}

// UpdateStatus is the JSON of GET /updates/status (the fields read).
type UpdateStatus struct {
	UpdateState  string `json:"update_state"` // Idle, Available, Staged, Ready
	ChosenUpdate *struct {
		Version string `json:"version"`
	} `json:"chosen_update"`
	MostRecentCommand *struct {
		CmdType   string `json:"cmd_type"`   // refresh, prepare, activate, deactivate
		CmdStatus string `json:"cmd_status"` // Success, Failed, Unknown
	} `json:"most_recent_command"`
}

// Update states of the host API.
const (
	BRIdle      = "Idle"
	BRAvailable = "Available"
	BRStaged    = "Staged"
	BRReady     = "Ready"
)

// errLocked marks a 423 answer.
var errLocked = errors.New("update lock held by another command (HTTP 423)")

func (b *Bottlerocket) http() *http.Client {
	if b.client == nil {
		sock := b.Socket
		if sock == "" {
			sock = DefaultAPISocket
		}
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}
		b.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	return b.client
}

// call sends one request, retrying 423s with backoff until ctx ends.
func (b *Bottlerocket) call(ctx context.Context, method, path string, out any) error {
	wait := b.Backoff
	if wait <= 0 {
		wait = 250 * time.Millisecond
	}
	for {
		err := b.once(ctx, method, path, out)
		if !errors.Is(err, errLocked) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %s: %w; gave up: %w", method, path, err, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(wait*2, 8*time.Second)
	}
}

func (b *Bottlerocket) once(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, nil)
	if err != nil {
		return err
	}
	resp, err := b.http().Do(req)
	if err != nil {
		return fmt.Errorf("host API %s %s on socket %s: %w (is the API socket mounted? set --api-socket)", method, path, b.socket(), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusLocked:
		return errLocked
	case resp.StatusCode >= 300:
		return fmt.Errorf("host API %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(body)))
	case out == nil:
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("host API %s %s answered what is not its JSON (%q): %w", method, path, truncate(string(body), 80), err)
	}
	return nil
}

func (b *Bottlerocket) socket() string {
	if b.Socket == "" {
		return DefaultAPISocket
	}
	return b.Socket
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func (b *Bottlerocket) status(ctx context.Context) (*UpdateStatus, error) {
	var st UpdateStatus
	if err := b.call(ctx, http.MethodGet, "/updates/status", &st); err != nil {
		return nil, err
	}
	switch st.UpdateState {
	case BRIdle, BRAvailable, BRStaged, BRReady:
		return &st, nil
	}
	return nil, fmt.Errorf("host API GET /updates/status: unknown update_state %q (want Idle, Available, Staged or Ready)", st.UpdateState)
}

// await polls the status until want holds, or the last command of cmd
// failed, or ctx ends.
func (b *Bottlerocket) await(ctx context.Context, cmd string, want func(*UpdateStatus) bool) (*UpdateStatus, error) {
	poll := b.Poll
	if poll <= 0 {
		poll = time.Second
	}
	for {
		st, err := b.status(ctx)
		if err != nil {
			return nil, err
		}
		if c := st.MostRecentCommand; c != nil && c.CmdType == cmd && c.CmdStatus == "Failed" {
			return st, fmt.Errorf("the host's %s command failed (update_state %s); see the host's update logs", cmd, st.UpdateState)
		}
		if want(st) {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for %s (update_state %s): %w", cmd, st.UpdateState, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// Check refreshes the host's list of updates and reads the chosen one.
func (b *Bottlerocket) Check(ctx context.Context) (Status, error) {
	cur, err := b.Version(ctx)
	if err != nil {
		return Status{}, err
	}
	if err := b.call(ctx, http.MethodPost, "/actions/refresh-updates", nil); err != nil {
		return Status{Current: cur}, err
	}
	st, err := b.await(ctx, "refresh", func(s *UpdateStatus) bool {
		c := s.MostRecentCommand
		return c != nil && c.CmdType == "refresh" && c.CmdStatus == "Success" || s.UpdateState != BRIdle
	})
	if err != nil {
		return Status{Current: cur}, err
	}
	out := Status{Current: cur}
	if st.UpdateState != BRIdle && st.ChosenUpdate != nil && st.ChosenUpdate.Version != cur {
		out.Available = st.ChosenUpdate.Version
	}
	return out, nil
}

// Prepare downloads the chosen update to the inactive partition.
func (b *Bottlerocket) Prepare(ctx context.Context) error {
	return b.step(ctx, "/actions/prepare-update", "prepare", BRStaged, BRReady)
}

// Perform makes the next boot use the inactive partition.
func (b *Bottlerocket) Perform(ctx context.Context) error {
	return b.step(ctx, "/actions/activate-update", "activate", BRReady)
}

func (b *Bottlerocket) step(ctx context.Context, path, cmd string, done ...string) error {
	isDone := func(s *UpdateStatus) bool {
		for _, d := range done {
			if s.UpdateState == d {
				return true
			}
		}
		return false
	}
	if st, err := b.status(ctx); err != nil {
		return err
	} else if isDone(st) {
		return nil // done before an agent restart
	}
	if err := b.call(ctx, http.MethodPost, path, nil); err != nil {
		return err
	}
	_, err := b.await(ctx, cmd, isDone)
	return err
}

// Reset undoes an activation that was not booted (POST
// /actions/deactivate-update: Ready goes back to Staged), so the next boot
// runs the version running now. The API has no call that discards a staged
// image: the inactive partition keeps it until the next prepare writes over
// it, which changes nothing for the next boot.
func (b *Bottlerocket) Reset(ctx context.Context) error {
	st, err := b.status(ctx)
	if err != nil {
		return err
	}
	if st.UpdateState != BRReady {
		return nil
	}
	if err := b.call(ctx, http.MethodPost, "/actions/deactivate-update", nil); err != nil {
		return err
	}
	_, err = b.await(ctx, "deactivate", func(s *UpdateStatus) bool { return s.UpdateState != BRReady })
	return err
}

// Reboot asks the host to reboot.
func (b *Bottlerocket) Reboot(ctx context.Context) error {
	return b.call(ctx, http.MethodPost, "/actions/reboot", nil)
}

// Version is version_id of GET /os.
func (b *Bottlerocket) Version(ctx context.Context) (string, error) {
	var os struct {
		VersionID string `json:"version_id"`
	}
	if err := b.call(ctx, http.MethodGet, "/os", &os); err != nil {
		return "", err
	}
	if os.VersionID == "" {
		return "", errors.New("host API GET /os: no version_id in its answer")
	}
	return os.VersionID, nil
}

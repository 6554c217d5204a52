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
	"syscall"
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
	UpdateState       string      `json:"update_state"` // Idle, Available, Staged, Ready
	ChosenUpdate      *Image      `json:"chosen_update"`
	StagingPartition  *Partition  `json:"staging_partition"`
	MostRecentCommand *CommandRun `json:"most_recent_command"`
}

// Image is an update image of the status document.
type Image struct {
	Version string `json:"version"`
}

// Partition is a partition set of the status document: the image it
// holds, and whether the next boot starts it.
type Partition struct {
	Image      *Image `json:"image"`
	NextToBoot bool   `json:"next_to_boot"`
}

// CommandRun is the status document's most recent command.
type CommandRun struct {
	CmdType    string `json:"cmd_type"`   // refresh, prepare, activate, deactivate
	CmdStatus  string `json:"cmd_status"` // Success, Failed, Unknown
	ExitStatus int    `json:"exit_status"`
	Stderr     string `json:"stderr"`
	Timestamp  string `json:"timestamp"`
}

// chosen and staged are the chosen update's and the staging partition's
// versions ("" when there is none).
func (s *UpdateStatus) chosen() string {
	if s.ChosenUpdate == nil {
		return ""
	}
	return s.ChosenUpdate.Version
}

func (s *UpdateStatus) staged() string {
	if s.StagingPartition == nil || s.StagingPartition.Image == nil {
		return ""
	}
	return s.StagingPartition.Image.Version
}

// Update states of the host API.
const (
	BRIdle      = "Idle"
	BRAvailable = "Available"
	BRStaged    = "Staged"
	BRReady     = "Ready"
)

// errLocked marks a 423 answer; errUninitialized the 404 of
// /updates/status before the first command of a boot.
var (
	errLocked        = errors.New("update lock held by another command (HTTP 423)")
	errUninitialized = errors.New("update status uninitialized since the boot (HTTP 404)")
)

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
	case resp.StatusCode == http.StatusNotFound && path == "/updates/status":
		return errUninitialized
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

// status reads /updates/status. After a boot the host has no status until
// its first update command (404): a refresh-updates initializes it, and
// the status is read again once the refresh ran (until then it is still
// 404, then 423 while the refresh holds the lock).
func (b *Bottlerocket) status(ctx context.Context) (*UpdateStatus, error) {
	st, err := b.read(ctx)
	if errors.Is(err, errUninitialized) {
		if err = b.call(ctx, http.MethodPost, "/actions/refresh-updates", nil); err == nil {
			st, err = b.await(ctx, "refresh", nil, func(*UpdateStatus) bool { return true })
		}
	}
	return st, err
}

// read reads /updates/status once (423s retried), its update_state checked.
func (b *Bottlerocket) read(ctx context.Context) (*UpdateStatus, error) {
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

// await polls the status after a command of type cmd was accepted, until
// that command ended (a most recent command of its type other than prev,
// the one the status showed before the command was sent) and want holds,
// or it failed, or ctx ends. The host runs the command after its POST is
// answered, holding the update lock: a read before it started shows prev
// (or, after a boot, no status: 404), a read while it runs is a 423.
func (b *Bottlerocket) await(ctx context.Context, cmd string, prev *CommandRun, want func(*UpdateStatus) bool) (*UpdateStatus, error) {
	poll := b.Poll
	if poll <= 0 {
		poll = time.Second
	}
	for {
		st, err := b.read(ctx)
		if err != nil && !errors.Is(err, errUninitialized) {
			return nil, err
		}
		state := "uninitialized"
		if st != nil {
			state = st.UpdateState
			if c := st.MostRecentCommand; c != nil && c.CmdType == cmd && (prev == nil || *c != *prev) {
				if c.CmdStatus == "Failed" {
					return st, fmt.Errorf("the host's %s command failed (exit status %d, update_state %s): %s",
						cmd, c.ExitStatus, st.UpdateState, orNoStderr(strings.TrimSpace(c.Stderr)))
				}
				if c.CmdStatus == "Success" && want(st) {
					return st, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for %s (update_state %s): %w", cmd, state, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// sent sends the command of the action path and awaits its end: prev is
// the most recent command the status showed before it.
func (b *Bottlerocket) sent(ctx context.Context, path, cmd string, prev *UpdateStatus, want func(*UpdateStatus) bool) (*UpdateStatus, error) {
	var before *CommandRun
	if prev != nil && prev.MostRecentCommand != nil {
		c := *prev.MostRecentCommand
		before = &c
	}
	if err := b.call(ctx, http.MethodPost, path, nil); err != nil {
		return nil, err
	}
	return b.await(ctx, cmd, before, want)
}

// Check refreshes the host's list of updates and reads the chosen one.
func (b *Bottlerocket) Check(ctx context.Context) (Status, error) {
	cur, err := b.Version(ctx)
	if err != nil {
		return Status{}, err
	}
	before, err := b.status(ctx)
	if err != nil {
		return Status{Current: cur}, err
	}
	st, err := b.sent(ctx, "/actions/refresh-updates", "refresh", before, func(*UpdateStatus) bool { return true })
	if err != nil {
		return Status{Current: cur}, err
	}
	out := Status{Current: cur}
	if st.UpdateState != BRIdle && st.ChosenUpdate != nil && st.ChosenUpdate.Version != cur {
		out.Available = st.ChosenUpdate.Version
	}
	if st.UpdateState == BRReady && st.staged() != cur { // activated, not booted: the next boot starts it
		out.Staged = st.staged()
	}
	return out, nil
}

// Prepare writes the chosen update to the staging partition. A staging
// partition that holds another version (an earlier prepare of another
// update) is prepared again: only the chosen version counts as prepared.
func (b *Bottlerocket) Prepare(ctx context.Context) error {
	st, err := b.status(ctx)
	if err != nil {
		return err
	}
	want := st.chosen()
	if want == "" {
		return fmt.Errorf("no update chosen by the host (update_state %s): nothing to prepare; the next check refreshes its list", st.UpdateState)
	}
	prepared := func(s *UpdateStatus) bool {
		return (s.UpdateState == BRStaged || s.UpdateState == BRReady) && s.staged() == want
	}
	if prepared(st) {
		return nil // done before an agent restart
	}
	if st.UpdateState == BRReady { // another version activated: not the next boot any more
		if st, err = b.deactivate(ctx, st); err != nil {
			return err
		}
	}
	_, err = b.sent(ctx, "/actions/prepare-update", "prepare", st, prepared)
	return err
}

// Perform makes the next boot use the staging partition, when it holds the
// chosen update (an image of another version is never activated).
func (b *Bottlerocket) Perform(ctx context.Context) error {
	st, err := b.status(ctx)
	if err != nil {
		return err
	}
	want := st.chosen()
	if st.staged() != want || want == "" || st.UpdateState != BRStaged && st.UpdateState != BRReady {
		return fmt.Errorf("the staging partition holds %q (update_state %s), not the chosen update %q: prepare it again", st.staged(), st.UpdateState, want)
	}
	if st.UpdateState == BRReady {
		return nil // done before an agent restart
	}
	_, err = b.sent(ctx, "/actions/activate-update", "activate", st, func(s *UpdateStatus) bool { return s.UpdateState == BRReady })
	return err
}

func orNoStderr(s string) string {
	if s == "" {
		return "no stderr; see the host's update logs"
	}
	return s
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
	_, err = b.deactivate(ctx, st)
	return err
}

// deactivate undoes an activation; st is the status read before it.
func (b *Bottlerocket) deactivate(ctx context.Context, st *UpdateStatus) (*UpdateStatus, error) {
	return b.sent(ctx, "/actions/deactivate-update", "deactivate", st, func(s *UpdateStatus) bool { return s.UpdateState != BRReady })
}

// Reboot asks the host to reboot. A connection closed or reset before the
// answer is the host going down: the reboot is under way, not a failure
// (the controller's reboot timeout covers a host that never comes back).
func (b *Bottlerocket) Reboot(ctx context.Context) error {
	err := b.call(ctx, http.MethodPost, "/actions/reboot", nil)
	if err != nil && GoingDown(err) {
		return nil
	}
	return err
}

// GoingDown reports whether err is a request that reached the host and
// got no answer because the connection was closed or reset: what a
// reboot call sees when the host goes down first. A socket that refuses
// the connection or does not exist is not: the request never arrived.
func GoingDown(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
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

package platform

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Command runs user commands in the agent's container, for any OS whose
// update tool they can reach (not Bottlerocket's updog: use the host API):
// Check's command prints the available version on its first line (nothing
// when up to date); Prepare, Apply and Reboot succeed by exiting 0; Version's
// command prints the running version; Reset's, when set, discards a
// prepared update (without one, a reset does nothing on the host). Each is
// an argv.
//
// The version command is required: an update succeeds only when the host
// comes back running the version chosen, and without it the agent cannot
// tell that version from a fallback boot (every success would be counted
// a failure and reset).
type Command struct {
	CheckCmd, PrepareCmd, ApplyCmd, RebootCmd, VersionCmd, ResetCmd []string
}

// Check runs the check command.
func (c *Command) Check(ctx context.Context) (Status, error) {
	out, err := run(ctx, "check", c.CheckCmd)
	if err != nil {
		return Status{}, err
	}
	cur, err := c.Version(ctx)
	if err != nil {
		return Status{}, err
	}
	first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	st := Status{Current: cur, Available: strings.TrimSpace(first)}
	if st.Available == cur {
		st.Available = ""
	}
	return st, nil
}

// Prepare runs the prepare command.
func (c *Command) Prepare(ctx context.Context) error {
	_, err := run(ctx, "prepare", c.PrepareCmd)
	return err
}

// Perform runs the apply command.
func (c *Command) Perform(ctx context.Context) error {
	_, err := run(ctx, "apply", c.ApplyCmd)
	return err
}

// Reboot runs the reboot command.
func (c *Command) Reboot(ctx context.Context) error {
	_, err := run(ctx, "reboot", c.RebootCmd)
	return err
}

// Version runs the version command: its first line is the version
// running. A command that prints nothing is an error, never "": an
// unknown version is not a version the controller can compare.
func (c *Command) Version(ctx context.Context) (string, error) {
	out, err := run(ctx, "version", c.VersionCmd)
	if err != nil {
		return "", err
	}
	first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	if first = strings.TrimSpace(first); first == "" {
		return "", fmt.Errorf("version command %q printed nothing: it must print the version running", c.VersionCmd)
	}
	return first, nil
}

// Reset runs the reset command, when there is one.
func (c *Command) Reset(ctx context.Context) error {
	if len(c.ResetCmd) == 0 {
		return nil
	}
	_, err := run(ctx, "reset", c.ResetCmd)
	return err
}

// Validate names the commands missing.
func (c *Command) Validate() error {
	var missing []string
	for _, f := range []struct {
		name string
		argv []string
	}{{"--check-command", c.CheckCmd}, {"--prepare-command", c.PrepareCmd}, {"--apply-command", c.ApplyCmd}, {"--reboot-command", c.RebootCmd}, {"--version-command", c.VersionCmd}} {
		if len(f.argv) == 0 {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the command platform needs %s (the version command prints the version running: "+
			"an update succeeds only when the host comes back running the version chosen, which cannot be told without it)", strings.Join(missing, ", "))
	}
	return nil
}

func run(ctx context.Context, what string, argv []string) (string, error) {
	if len(argv) == 0 {
		return "", fmt.Errorf("no %s command: set --%s-command", what, what)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		var ee *exec.ExitError
		if errors.As(err, &ee) && msg != "" {
			return "", fmt.Errorf("%s command %q: %w: %s", what, argv, err, lastLine(msg))
		}
		return "", fmt.Errorf("%s command %q: %w", what, argv, err)
	}
	return stdout.String(), nil
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/channel"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/lock"
	"slipway.dev/slipway/upgrade/progress"
	"slipway.dev/slipway/upgrade/reboot"
	"slipway.dev/slipway/upgrade/release"
	"slipway.dev/slipway/version"
)

// hostCommands returns the node-side commands: upgrade, rollback, status.
func hostCommands() []*cli.Command {
	return []*cli.Command{upgradeCommand(), rollbackCommand(), statusCommand(), pruneCommand()}
}

func envs(name string) []string { return []string{"SLIPWAY_" + name} }

func systemDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "system-dir", Value: upgrade.DefaultSystemDir, Usage: "the k3os system directory", EnvVars: envs("SYSTEM_DIR")}
}

func componentFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "rootfs", Usage: "include the rootfs (k3os/<version>)", EnvVars: envs("ROOTFS")},
		&cli.BoolFlag{Name: "kernel", Usage: "include the kernel (kernel/<kernel-version>)", EnvVars: envs("KERNEL")},
		&cli.BoolFlag{Name: "k3s", Usage: "include k3s (k3s/<k3s-version>, from the rootfs artifact)", EnvVars: envs("K3S")},
	}
}

// swapFlags are shared by upgrade and rollback.
func swapFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "remount", Usage: "remount the system directory's mount read-write for the swap, read-only after", EnvVars: envs("REMOUNT")},
		&cli.BoolFlag{Name: "sync", Usage: "sync(2) all filesystems after the swap", EnvVars: envs("SYNC")},
		&cli.BoolFlag{Name: "reboot", Usage: "reboot after --reboot-delay; default: only when the system directory is the one this host booted from (--reboot=false to only install, --reboot to reboot anyway)", EnvVars: envs("REBOOT")},
		&cli.DurationFlag{Name: "reboot-delay", Value: 5 * time.Second, Usage: "wait before rebooting; SIGINT/SIGTERM cancels the reboot", EnvVars: envs("REBOOT_DELAY")},
		&cli.StringFlag{Name: "reboot-command", Usage: "reboot by running this command (e.g. \"systemctl reboot\") instead of logind or reboot(2)", EnvVars: envs("REBOOT_COMMAND")},
		&cli.StringFlag{Name: "lock-file", Value: lock.DefaultPath, Usage: "the upgrade lock; a second upgrade or rollback fails at once while it is held", EnvVars: envs("LOCK_FILE")},
		&cli.BoolFlag{Name: "dry-run", Usage: "print what would change, change nothing", EnvVars: envs("DRY_RUN")},
		&cli.BoolFlag{Name: "json", Usage: "print the result as JSON on stdout", EnvVars: envs("JSON")},
		&cli.StringFlag{Name: "test-crash-at", Hidden: true, EnvVars: envs("TEST_CRASH_AT"), Usage: "tests only: SIGKILL this process after the named step of the swap; @FILE: the fault FILE names (see testFaults)"},
	}
}

func upgradeCommand() *cli.Command {
	return &cli.Command{
		Name:      "upgrade",
		Usage:     "stage, verify and atomically swap in a new rootfs, kernel and/or k3s, then reboot",
		UsageText: "slipway ops upgrade --source URL|DIR [--version VERSION|latest] [--rootfs] [--kernel] [--k3s] [options]",
		Description: `Downloads the k3os-format artifacts of a release from --source, verifies each against the
release's sha256sum-<arch>.txt while unpacking it into a staging folder on the system
directory's filesystem, renames it into place, then points <component>/previous at the old
version and <component>/current at the new one. A crash at any moment leaves a bootable
current. On any error before the swap, the system directory is left exactly as it was.

Without --rootfs/--kernel/--k3s, the rootfs and the kernel are upgraded; with any of them,
exactly the ones given. Sources: a mirror directory or file:// URL (<dir>/<version>/<artifact>
and a latest file), an https URL whose .../latest redirects to .../<version>, or
github-releases://owner/repo (token from GITHUB_TOKEN).

Exit codes: 0 done or already current, 1 other error, 2 usage, 3 locked by another run,
4 checksum mismatch or truncated download, 5 unknown version or missing artifact,
6 not enough space, 7 read-only system directory without --remount.

Examples:
  slipway ops upgrade --source github-releases://rancher/k3os --version latest
  slipway ops upgrade --source /srv/mirror --version v1.2.3 --k3s --rootfs --reboot=false
  slipway ops upgrade --source https://example.com/releases/latest --remount --reboot-delay 30s
  slipway ops upgrade --source /srv/mirror --version v1.2.3 --dry-run --json
  slipway ops upgrade --source /srv/mirror --version v1.2.3 --phase stage      # ahead of time
  slipway ops upgrade --source /srv/mirror --version v1.2.3 --phase activate   # later: swap only`,
		Flags: append(append([]cli.Flag{
			systemDirFlag(),
			&cli.StringFlag{Name: "source", Usage: "release channel URL or mirror directory", EnvVars: envs("SOURCE"), Required: true},
			&cli.StringFlag{Name: "version", Value: "latest", Usage: "version to install, or latest", EnvVars: envs("VERSION")},
			&cli.StringFlag{Name: "arch", Value: release.Arch(), Usage: "artifact architecture", EnvVars: envs("ARCH")},
			&cli.StringFlag{Name: "phase", Value: phaseAll, Usage: "all: stage and swap; stage: download, verify and install the version's folders, moving no link (no reboot); activate: swap to a version staged before, downloading nothing (no reboot)", EnvVars: envs("PHASE")},
		}, componentFlags()...), swapFlags()...),
		Action: upgradeAction,
	}
}

func upgradeAction(c *cli.Context) error {
	src, err := channel.New(c.String("source"), channel.Options{
		GitHubToken: os.Getenv("GITHUB_TOKEN"),
		UserAgent:   "slipway/" + version.Get().Version,
	})
	if err != nil {
		return exit(err, upgrade.ExitUsage)
	}
	o := upgrade.Options{
		SystemDir: c.String("system-dir"), Source: src, Version: c.String("version"),
		Components: components(c), Arch: c.String("arch"),
		Remount: c.Bool("remount"), Sync: c.Bool("sync"), Reboot: rebootWanted(c),
		RebootDelay: c.Duration("reboot-delay"), Rebooter: rebooter(c.String("reboot-command")),
		LockFile: c.String("lock-file"), Command: strings.Join(os.Args, " "), DryRun: c.Bool("dry-run"),
		Progress: progress.New(os.Stderr, progress.Options{}),
	}
	o.Hook, o.Fail = testFaults(c.String("test-crash-at"))
	run, err := phaseRunner(c.String("phase"))
	if err != nil {
		return exit(err, upgrade.ExitUsage)
	}
	res, err := run(c.Context, o)
	if res != nil {
		if perr := printResult(c.App.Writer, c.Bool("json"), res); perr != nil && err == nil {
			err = perr
		}
	}
	return exit(err, upgrade.ExitCode(err))
}

func rollbackCommand() *cli.Command {
	return &cli.Command{
		Name:      "rollback",
		Usage:     "swap each component's current and previous versions back, then reboot",
		UsageText: "slipway ops rollback [--rootfs] [--kernel] [--k3s] [options]",
		Description: `Exchanges <component>/current and <component>/previous atomically, under the same lock as
upgrade. Without component switches, what the last upgrade swapped rolls back: the rootfs,
and the kernel and k3s when their current version came from the same release (a kernel the
release kept stays). A component with no previous version fails the rollback before any link
changes (exit code 8).

With --from COMPONENT=VERSION the rollback is idempotent: it rolls that component back only
while its current is VERSION, and succeeds doing nothing when it is already rolled back
(current elsewhere, previous VERSION), so a second run (a Job's pod started twice) does not
swap the links back again. Any other state fails before a link changes (exit code 8).

Examples:
  slipway ops rollback --reboot=false
  slipway ops rollback --rootfs --k3s --reboot-delay 1m
  slipway ops rollback --rootfs --from rootfs=v1.2.0 --reboot=false`,
		Flags: append(append(append([]cli.Flag{systemDirFlag()}, componentFlags()...), swapFlags()...),
			&cli.StringSliceFlag{Name: "from", Usage: "`COMPONENT=VERSION`: roll the component back only while its current is VERSION; already rolled back is success (repeatable)"}),
		Action: rollbackAction,
	}
}

func rollbackAction(c *cli.Context) error {
	from, err := rollbackFrom(c.StringSlice("from"))
	if err != nil {
		return exit(err, upgrade.ExitUsage)
	}
	res, err := upgrade.Rollback(c.Context, upgrade.RollbackOptions{
		From:      from,
		SystemDir: c.String("system-dir"), Components: chosenComponents(c),
		Remount: c.Bool("remount"), Sync: c.Bool("sync"), Reboot: rebootWanted(c),
		RebootDelay: c.Duration("reboot-delay"), Rebooter: rebooter(c.String("reboot-command")),
		LockFile: c.String("lock-file"), Command: strings.Join(os.Args, " "), DryRun: c.Bool("dry-run"),
		Hook: hookOnly(testFaults(c.String("test-crash-at"))),
	})
	if res != nil {
		if perr := printResult(c.App.Writer, c.Bool("json"), res); perr != nil && err == nil {
			err = perr
		}
	}
	return exit(err, upgrade.ExitCode(err))
}

// rollbackFrom parses --from's COMPONENT=VERSION pairs.
func rollbackFrom(pairs []string) (map[layout.Component]string, error) {
	from := map[layout.Component]string{}
	for _, p := range pairs {
		name, v, ok := strings.Cut(p, "=")
		c, known := map[string]layout.Component{"rootfs": layout.Rootfs, "kernel": layout.Kernel, "k3s": layout.K3s}[name]
		if !ok || !known || v == "" {
			return nil, fmt.Errorf("--from %q: want COMPONENT=VERSION with COMPONENT rootfs, kernel or k3s, e.g. --from rootfs=v1.2.0", p)
		}
		from[c] = v
	}
	return from, nil
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show the current and previous version of each component",
		UsageText: "slipway ops status [--system-dir DIR] [--json]",
		Description: `Reads the system directory's current and previous links; takes no lock, changes nothing.

Examples:
  slipway ops status
  slipway ops status --system-dir /mnt/k3os/system --json`,
		Flags: []cli.Flag{systemDirFlag(), &cli.BoolFlag{Name: "json", Usage: "print as JSON", EnvVars: envs("JSON")}},
		Action: func(c *cli.Context) error {
			rep, err := upgrade.Status(upgrade.StatusOptions{SystemDir: c.String("system-dir")})
			if err != nil {
				return exit(err, upgrade.ExitCode(err))
			}
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(rep)
			}
			return rep.WriteText(c.App.Writer)
		},
	}
}

// components maps the switches: none given means the defaults, otherwise
// exactly the ones set to true.
func components(c *cli.Context) []layout.Component {
	var out []layout.Component
	any := false
	for _, s := range []struct {
		flag string
		comp layout.Component
	}{{"rootfs", layout.Rootfs}, {"kernel", layout.Kernel}, {"k3s", layout.K3s}} {
		if c.IsSet(s.flag) {
			any = true
			if c.Bool(s.flag) {
				out = append(out, s.comp)
			}
		}
	}
	if !any {
		return upgrade.DefaultComponents
	}
	return out
}

// chosenComponents is components(c), or none when no switch is given
// (`ops rollback` then chooses what the last upgrade swapped).
func chosenComponents(c *cli.Context) []layout.Component {
	for _, f := range []string{"rootfs", "kernel", "k3s"} {
		if c.IsSet(f) {
			return components(c)
		}
	}
	return nil
}

// rebootWanted is --reboot when given (flag or SLIPWAY_REBOOT); otherwise a
// reboot follows only when the system directory is the one this host booted
// from, and the user is told why not when it is not.
func rebootWanted(c *cli.Context) bool {
	if c.IsSet("reboot") {
		return c.Bool("reboot")
	}
	booted, why := reboot.BootedFrom(c.String("system-dir"), reboot.ReadHost())
	if !booted && !c.Bool("dry-run") {
		fmt.Fprintf(c.App.ErrWriter, "slipway: no reboot will follow: %s (%s); pass --reboot to reboot anyway\n", why, c.String("system-dir"))
	}
	return booted
}

func rebooter(command string) reboot.Rebooter {
	if f := strings.Fields(command); len(f) > 0 {
		return reboot.Command{Argv: f}
	}
	return reboot.Auto()
}

// testFaults are the hooks of the hidden --test-crash-at
// (SLIPWAY_TEST_CRASH_AT), for crash-safety tests and simulated hosts:
//   - STEP: SIGKILL this process right after the named step;
//   - @FILE: FILE (a path relative to the working directory, read at each
//     step; absent: no fault) names the fault:
//   - "STEP": a power cut after the step, once: FILE is claimed (renamed),
//     FILE.fired is written with this process's pid, and the process stops
//     itself (SIGSTOP) so that it writes nothing more; the simulator then
//     kills every process of the node and reboots it;
//   - "enospc STEP": that step of staging fails with ENOSPC (a full
//     disk), for as long as FILE says so.
func testFaults(spec string) (hook func(string), fail func(string) error) {
	file, armed := strings.CutPrefix(spec, "@")
	switch {
	case spec == "":
		return nil, nil
	case !armed:
		return func(s string) {
			if s == spec {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}, nil
	}
	read := func() (kind, step string) {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", ""
		}
		w := strings.Fields(string(b))
		switch len(w) {
		case 1:
			return "cut", w[0]
		case 2:
			return w[0], w[1]
		}
		return "", ""
	}
	hook = func(s string) {
		if kind, step := read(); kind != "cut" || step != s {
			return
		}
		claimed := file + ".claimed"
		if os.Rename(file, claimed) != nil {
			return // another run claimed it
		}
		fired := file + ".fired"
		if os.WriteFile(fired+".tmp", []byte(fmt.Sprintf("%d %s\n", os.Getpid(), s)), 0o644) == nil && os.Rename(fired+".tmp", fired) == nil {
			_ = os.Remove(claimed)
			fmt.Fprintf(os.Stderr, "slipway: test power cut after step %s: stopped\n", s)
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		}
	}
	fail = func(s string) error {
		if kind, step := read(); kind == "enospc" && step == s {
			return fmt.Errorf("test fault at step %s: %w", s, syscall.ENOSPC)
		}
		return nil
	}
	return hook, fail
}

// hookOnly is testFaults' hook alone (a rollback stages nothing).
func hookOnly(hook func(string), _ func(string) error) func(string) { return hook }

func printResult(w io.Writer, asJSON bool, r *upgrade.Result) error {
	if asJSON {
		return json.NewEncoder(w).Encode(r)
	}
	var b strings.Builder
	switch {
	case r.AlreadyCurrent:
		fmt.Fprintf(&b, "already at %s; nothing to do\n", r.Version)
	case r.DryRun && r.Version == "":
		fmt.Fprintf(&b, "dry run: would roll back %s\n", r.SystemDir)
	case r.DryRun:
		fmt.Fprintf(&b, "dry run: would upgrade %s to %s\n", r.SystemDir, r.Version)
	case r.Version != "":
		fmt.Fprintf(&b, "upgraded %s to %s\n", r.SystemDir, r.Version)
	default:
		fmt.Fprintf(&b, "rolled back %s\n", r.SystemDir)
	}
	for _, cr := range r.Components {
		fmt.Fprintf(&b, "  %-7s %-22s -> %-22s (%s)\n", cr.Component, orNone(cr.From), orNone(cr.To), cr.Action)
	}
	if r.Rebooting {
		b.WriteString("rebooting\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// exitError carries an exit code to main through cli.ExitCoder.
type exitError struct {
	err  error
	code int
}

func (e exitError) Error() string { return "slipway: " + e.err.Error() }
func (e exitError) ExitCode() int { return e.code }
func (e exitError) Unwrap() error { return e.err }

func exit(err error, code int) error {
	if err == nil {
		return nil
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return err
	}
	return exitError{err: err, code: code}
}

package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"slipway.dev/slipway/upgrade/boot"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/lock"
)

// What a slipway host runs and what its `current` links name are two
// things: perform-update moves the links, the host runs the new version
// only after it reboots (and not at all when the boot loader falls back).
// The platform decides once per boot what that boot runs and records it
// with the boot's ID, as `ops agent` does on its Node.

// BootRecord is what one boot runs, per component, recorded the first time
// the platform sees that boot.
type BootRecord struct {
	BootID   string                      `json:"bootID"`
	Versions map[layout.Component]string `json:"versions"`
}

// Running decides the versions this boot runs, and whether they are to be
// recorded (a boot seen for the first time):
//   - a boot already recorded (same boot ID) runs what was recorded;
//   - a boot seen for the first time runs what `current` names (nothing
//     moves the links before the agent starts on a boot), except that the
//     boot loader's own word for the rootfs (slipway.rootfs= on the kernel
//     command line) beats the link: a boot that fell back runs `previous`.
func Running(rec BootRecord, bootID, cmdlineRootfs string, current map[layout.Component]string) (map[layout.Component]string, bool) {
	if rec.BootID != "" && rec.BootID == bootID && rec.Versions[layout.Rootfs] != "" {
		return rec.Versions, false
	}
	out := make(map[layout.Component]string, len(current))
	for c, v := range current {
		out[c] = v
	}
	if cmdlineRootfs != "" {
		out[layout.Rootfs] = cmdlineRootfs
	}
	return out, true
}

// Defaults of the evidence the slipway platform reads about its boot.
const (
	DefaultBootIDFile  = "/proc/sys/kernel/random/boot_id"
	DefaultCmdlineFile = "/proc/cmdline"
	// bootRecordName sits beside the upgrade lock, in the host's /run: a
	// tmpfs, so it goes with the boot it describes (the boot ID checks it
	// all the same).
	bootRecordName = "slipway-update-operator-boot.json"
)

func (s *Slipway) recordFile() string {
	if s.RecordFile != "" {
		return s.RecordFile
	}
	l := s.LockFile
	if l == "" {
		l = lock.DefaultPath
	}
	return filepath.Join(filepath.Dir(l), bootRecordName)
}

func (s *Slipway) bootID(ctx context.Context) (string, error) {
	if s.BootID != nil {
		return s.BootID(ctx)
	}
	b, err := os.ReadFile(DefaultBootIDFile)
	if err != nil {
		return "", fmt.Errorf("read the boot ID from %s: %w", DefaultBootIDFile, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// running is what this boot runs, per component (recorded at its first sight).
func (s *Slipway) running(ctx context.Context) (map[layout.Component]string, error) {
	id, err := s.bootID(ctx)
	if err != nil {
		return nil, err
	}
	lay := layout.New(s.SystemDir)
	current := map[layout.Component]string{}
	for _, c := range layout.Components {
		if current[c], err = lay.Current(c); err != nil {
			return nil, fmt.Errorf("read the current versions in %s: %w", s.SystemDir, err)
		}
	}
	var rec BootRecord
	file := s.recordFile()
	switch b, err := os.ReadFile(file); {
	case err == nil:
		_ = json.Unmarshal(b, &rec) // an unreadable record is one of another boot
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read the boot record %s: %w", file, err)
	}
	cmdline := s.CmdlineFile
	if cmdline == "" {
		cmdline = DefaultCmdlineFile
	}
	var loader string
	if b, err := os.ReadFile(cmdline); err == nil {
		loader = boot.CmdlineValue(strings.TrimSpace(string(b)), boot.ArgRootfs)
	}
	run, fresh := Running(rec, id, loader, current)
	if fresh {
		if err := writeRecord(file, BootRecord{BootID: id, Versions: run}); err != nil {
			return nil, err
		}
	}
	return run, nil
}

func writeRecord(file string, rec BootRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("record what this boot runs: %w", err)
	}
	// A temporary file of its own: two readers of a fresh boot (the agent's
	// turn and a status read) may record it at once; each renames whole.
	tmp, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".*.tmp")
	if err != nil {
		return fmt.Errorf("record what this boot runs: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename; removes a failed write's leftover
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	if err != nil {
		return fmt.Errorf("record what this boot runs: %w", err)
	}
	return nil
}

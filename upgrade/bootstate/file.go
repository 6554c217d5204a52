package bootstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"slipway.dev/slipway/upgrade/layout"
)

// Path is the record's path in the system directory systemDir.
func Path(systemDir string) string { return filepath.Join(systemDir, FileName) }

// Load reads the record of systemDir; a missing record is the zero State.
func Load(systemDir string) (State, error) {
	var s State
	b, err := os.ReadFile(Path(systemDir))
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("read boot state: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("parse boot state %s: %w (remove it to start a fresh record)", Path(systemDir), err)
	}
	return s, nil
}

// Save writes the record atomically: a temp file in systemDir, fsync, rename
// over the record, fsync of the folder.
func Save(systemDir string, s State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode boot state: %w", err)
	}
	f, err := os.CreateTemp(systemDir, "."+FileName+".*.tmp")
	if err != nil {
		return fmt.Errorf("write boot state: %w (is the system directory writable?)", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write boot state: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync boot state: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write boot state: %w", err)
	}
	if err := os.Rename(f.Name(), Path(systemDir)); err != nil {
		return fmt.Errorf("replace boot state: %w", err)
	}
	return layout.SyncDir(systemDir)
}

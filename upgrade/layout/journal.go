package layout

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A swap moves several links (each component's previous and current), one
// rename each. A power loss between two of them would leave the `current`
// links naming a rootfs and a kernel of two releases, a pair nobody chose,
// which the loader would then try. So a swap first writes the links it is
// about to set into a journal (synced), sets them, and removes the journal:
// a journal found later is a swap cut short, and FinishSwap completes it
// (every version it names was staged and synced before it was written).
// Whoever changes links next (the loader at boot, `ops upgrade`, `ops
// rollback`) finishes a pending swap first, so a journal never outlives
// the next change of links.

// JournalFile is the swap journal's name in the system directory.
const JournalFile = "swap-journal.json"

// LinkChange is one link a swap sets: component c's link Link to Version.
type LinkChange struct {
	Component Component `json:"component"`
	Link      string    `json:"link"`
	Version   string    `json:"version"`
}

// SetLinks sets changes in order as one swap: journal written and synced,
// each link set (after, when not nil, runs after each: crash tests stop
// there), journal removed. A crash anywhere in between leaves the journal,
// and FinishSwap completes the swap.
func (l Layout) SetLinks(changes []LinkChange, after func(LinkChange)) error {
	if len(changes) == 0 {
		return nil
	}
	for _, ch := range changes {
		if err := ValidVersion(ch.Version); err != nil {
			return fmt.Errorf("swap %s/%s: %w", ch.Component, ch.Link, err)
		}
	}
	if err := l.writeJournal(changes); err != nil {
		return err
	}
	for _, ch := range changes {
		if err := l.SetLink(ch.Component, ch.Link, ch.Version); err != nil {
			return err // the journal stays: the next change of links finishes the swap
		}
		if after != nil {
			after(ch)
		}
	}
	return l.removeJournal()
}

// PendingSwap returns the links of a swap a crash cut short (nil: none).
func (l Layout) PendingSwap() ([]LinkChange, error) {
	b, err := os.ReadFile(filepath.Join(l.Root, JournalFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the swap journal: %w", err)
	}
	var changes []LinkChange
	if err := json.Unmarshal(b, &changes); err != nil {
		// Written whole by a rename after a sync, so never torn: a journal
		// that does not parse was written by someone else.
		return nil, fmt.Errorf("swap journal %s: %w (remove it once the current links name one release)", filepath.Join(l.Root, JournalFile), err)
	}
	return changes, nil
}

// FinishSwap completes a swap a crash cut short: it sets every link the
// journal names (those already set are set again, to the same version) and
// removes the journal. It reports whether there was one.
func (l Layout) FinishSwap() (bool, error) {
	changes, err := l.PendingSwap()
	if err != nil || changes == nil {
		return false, err
	}
	for _, ch := range changes {
		if err := l.SetLink(ch.Component, ch.Link, ch.Version); err != nil {
			return false, fmt.Errorf("finish an interrupted swap: %w", err)
		}
	}
	return true, l.removeJournal()
}

func (l Layout) writeJournal(changes []LinkChange) error {
	b, err := json.Marshal(changes)
	if err != nil {
		return err
	}
	path := filepath.Join(l.Root, JournalFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write the swap journal: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write the swap journal: %w", err)
	}
	return SyncDir(l.Root)
}

func (l Layout) removeJournal() error {
	if err := os.Remove(filepath.Join(l.Root, JournalFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the swap journal: %w", err)
	}
	return SyncDir(l.Root)
}

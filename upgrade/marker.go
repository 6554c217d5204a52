package upgrade

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// MarkerFile is written into a version folder while it is staged, before the
// folder is renamed into place: a folder with a marker is complete.
const MarkerFile = ".slipway-release"

// Marker records the release a version folder came from.
type Marker struct {
	Release   string            `json:"release"`
	Artifacts map[string]string `json:"artifacts"` // artifact name -> sha256
	Installed time.Time         `json:"installed"`
}

// matches reports whether m records release with exactly the digests sums.
func (m *Marker) matches(release string, sums map[string]string) bool {
	if m == nil || m.Release != release || len(sums) == 0 {
		return false
	}
	for name, sum := range sums {
		if m.Artifacts[name] != sum {
			return false
		}
	}
	return true
}

// readMarker reads dir's marker; nil when there is none or it is unreadable.
func readMarker(dir string) *Marker {
	b, err := os.ReadFile(filepath.Join(dir, MarkerFile))
	if err != nil {
		return nil
	}
	var m Marker
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return &m
}

func writeMarker(dir string, m Marker) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, MarkerFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write completion marker: %w", err)
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return !errors.Is(err, fs.ErrNotExist)
}

// ReleaseOf is the release the version folder dir was staged from, as its
// marker records it; "" when it has no readable marker (a folder installed
// by other means than slipway).
func ReleaseOf(dir string) string {
	if m := readMarker(dir); m != nil {
		return m.Release
	}
	return ""
}

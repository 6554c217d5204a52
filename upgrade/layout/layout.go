// Package layout names the paths of a k3os-compatible system directory:
//
//	<root>/k3os/<version>/...          k3os/current, k3os/previous
//	<root>/kernel/<kversion>/{kernel.squashfs,initrd}
//	<root>/k3s/<version>/k3s
//
// and moves its `current` and `previous` symlinks atomically. It does no
// staging or locking; callers hold the upgrade lock while they change links.
package layout

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Component is one independently versioned part of the OS; its value is the
// name of its folder in the system directory.
type Component string

// The components of a k3os system directory.
const (
	Rootfs Component = "k3os"
	Kernel Component = "kernel"
	K3s    Component = "k3s"
)

// Components lists every component in the order they are swapped.
var Components = []Component{Rootfs, Kernel, K3s}

// The names of the links inside each component's folder.
const (
	CurrentLink  = "current"
	PreviousLink = "previous"
)

// Layout is a system directory.
type Layout struct{ Root string }

// New returns the layout of the system directory root.
func New(root string) Layout { return Layout{Root: root} }

// Dir is the folder of component c.
func (l Layout) Dir(c Component) string { return filepath.Join(l.Root, string(c)) }

// VersionDir is the folder holding version of component c.
func (l Layout) VersionDir(c Component, version string) string {
	return filepath.Join(l.Dir(c), version)
}

// Current returns the version the `current` link of c points at, "" if there
// is no such link.
func (l Layout) Current(c Component) (string, error) { return l.Link(c, CurrentLink) }

// Previous returns the version the `previous` link of c points at, "" if
// there is no such link.
func (l Layout) Previous(c Component) (string, error) { return l.Link(c, PreviousLink) }

// Link returns the version the link name of c points at, "" if it does not
// exist. A link pointing outside the component's folder is an error.
func (l Layout) Link(c Component, name string) (string, error) {
	target, err := os.Readlink(filepath.Join(l.Dir(c), name))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s/%s link: %w (fix or remove the link)", c, name, err)
	}
	v := filepath.Clean(target)
	if filepath.IsAbs(v) {
		if filepath.Dir(v) != filepath.Clean(l.Dir(c)) {
			return "", fmt.Errorf("%s/%s points at %q, outside %s: point it at a version folder", c, name, target, l.Dir(c))
		}
		v = filepath.Base(v)
	}
	if err := ValidVersion(v); err != nil {
		return "", fmt.Errorf("%s/%s points at %q: %w", c, name, target, err)
	}
	return v, nil
}

// SetLink points the link name of c at version atomically: it writes the
// relative symlink name.tmp, renames it over name and fsyncs the folder. A
// crash leaves either the old or the new link, never none.
func (l Layout) SetLink(c Component, name, version string) error {
	if err := ValidVersion(version); err != nil {
		return err
	}
	if err := ValidVersion(name); err != nil {
		return fmt.Errorf("link name: %w", err)
	}
	dir := l.Dir(c)
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale %s: %w", tmp, err)
	}
	if err := os.Symlink(version, tmp); err != nil {
		return fmt.Errorf("link %s/%s to %s: %w", c, name, version, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("link %s/%s to %s: %w", c, name, version, err)
	}
	return SyncDir(dir)
}

// ValidVersion reports whether v can name a version folder: one path
// element, not "." or "..", not hidden, and not a link name's temp file.
func ValidVersion(v string) error {
	switch {
	case v == "", v == ".", v == "..":
		return fmt.Errorf("invalid version %q: name a version such as v1.2.3", v)
	case strings.ContainsAny(v, "/\\\x00"):
		return fmt.Errorf("invalid version %q: a version is one path element", v)
	case strings.HasPrefix(v, "."):
		return fmt.Errorf("invalid version %q: a version may not start with a dot", v)
	case strings.HasSuffix(v, ".tmp"):
		return fmt.Errorf("invalid version %q: .tmp names are reserved for staging", v)
	}
	return nil
}

// SyncDir fsyncs a directory so that renames and new entries in it survive a
// crash.
func SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

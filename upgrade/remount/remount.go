// Package remount finds the mount holding a path (from /proc/self/mountinfo)
// and makes it writable for the duration of a swap, restoring read-only
// afterwards.
package remount

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount is one line of mountinfo that matters here.
type Mount struct {
	Point     string   // mount point
	Options   []string // per-mount options (ro, nosuid, ...)
	SuperOpts []string // superblock options
}

// ReadOnly reports whether the mount itself is read-only.
func (m Mount) ReadOnly() bool { return has(m.Options, "ro") }

// SuperReadOnly reports whether the filesystem (superblock) is read-only.
func (m Mount) SuperReadOnly() bool { return has(m.SuperOpts, "ro") }

func has(opts []string, o string) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}

// Find returns the mount that holds path (symlinks resolved).
func Find(path string) (Mount, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return Mount{}, fmt.Errorf("resolve %s: %w", path, err)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Mount{}, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	mounts, err := ParseMountinfo(f)
	if err != nil {
		return Mount{}, err
	}
	m, ok := Containing(mounts, real)
	if !ok {
		return Mount{}, fmt.Errorf("no mount holds %s", real)
	}
	return m, nil
}

// Containing picks the mount whose point is the longest prefix of path; of
// equal points the last mounted (it is on top).
func Containing(mounts []Mount, path string) (Mount, bool) {
	var best Mount
	found := false
	for _, m := range mounts {
		if within(path, m.Point) && (!found || len(m.Point) >= len(best.Point)) {
			best, found = m, true
		}
	}
	return best, found
}

func within(path, point string) bool {
	if point == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == point || strings.HasPrefix(path, point+"/")
}

// ParseMountinfo reads the format of proc(5) /proc/self/mountinfo.
func ParseMountinfo(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" && i >= 6 {
				sep = i
				break
			}
		}
		if len(fields) < 6 || sep < 0 || len(fields) < sep+3 {
			return nil, fmt.Errorf("malformed mountinfo line %q", sc.Text())
		}
		m := Mount{Point: unescape(fields[4]), Options: strings.Split(fields[5], ",")}
		if len(fields) > sep+3 {
			m.SuperOpts = strings.Split(fields[sep+3], ",")
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// unescape decodes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1:i+4]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '7' {
			return false
		}
	}
	return len(s) == 3
}

// flags maps the per-mount options kept across a remount to mount(2) flags.
func flags(opts []string) uintptr {
	var f uintptr
	for _, o := range opts {
		switch o {
		case "nosuid":
			f |= unix.MS_NOSUID
		case "nodev":
			f |= unix.MS_NODEV
		case "noexec":
			f |= unix.MS_NOEXEC
		case "noatime":
			f |= unix.MS_NOATIME
		case "nodiratime":
			f |= unix.MS_NODIRATIME
		case "relatime":
			f |= unix.MS_RELATIME
		}
	}
	return f
}

// Writable makes the mount holding path writable and returns a function
// that restores it read-only. When it is already writable, restore does
// nothing.
func Writable(path string) (restore func() error, err error) {
	m, err := Find(path)
	if err != nil {
		return nil, err
	}
	noop := func() error { return nil }
	if !m.ReadOnly() && !m.SuperReadOnly() {
		return noop, nil
	}
	keep := flags(m.Options)
	if m.SuperReadOnly() {
		if err := unix.Mount("", m.Point, "", unix.MS_REMOUNT|keep, ""); err != nil {
			return nil, fmt.Errorf("remount %s read-write: %w", m.Point, err)
		}
	}
	if m.ReadOnly() {
		if err := unix.Mount("", m.Point, "", unix.MS_REMOUNT|unix.MS_BIND|keep, ""); err != nil {
			return nil, fmt.Errorf("remount %s read-write: %w", m.Point, err)
		}
	}
	return func() error {
		if m.ReadOnly() {
			if err := unix.Mount("", m.Point, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|keep, ""); err != nil {
				return fmt.Errorf("remount %s read-only again: %w (run `mount -o remount,ro %s`)", m.Point, err, m.Point)
			}
		}
		if m.SuperReadOnly() {
			if err := unix.Mount("", m.Point, "", unix.MS_REMOUNT|unix.MS_RDONLY|keep, ""); err != nil {
				return fmt.Errorf("remount %s read-only again: %w (run `mount -o remount,ro %s`)", m.Point, err, m.Point)
			}
		}
		return nil
	}, nil
}

// IsWritable reports whether the folder can be written: its mount is not
// read-only and access(2) allows writing.
func IsWritable(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Flags&unix.ST_RDONLY != 0 {
		return false
	}
	return unix.Access(dir, unix.W_OK) == nil
}

package extract

import (
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// dirCacheSize bounds the directories kept open: a tar stream lists a
// directory's files together, with its subdirectories' in between.
const dirCacheSize = 16

// dirCache keeps the directories files were last created in open, so that
// a file is created by its own name in an open directory, with one system
// call, instead of through a path walked from the root each time. The
// directories are opened through the root, so they are inside it; a name
// of one path element created with O_EXCL (which never follows a symlink)
// is inside its directory.
type dirCache struct {
	root  *os.Root
	open  map[string]*os.File
	order []string // oldest first
}

func newDirCache(root *os.Root) *dirCache {
	return &dirCache{root: root, open: map[string]*os.File{}}
}

// get returns the directory dir (relative to the root), created if missing.
func (c *dirCache) get(dir string) (*os.File, error) {
	if d, ok := c.open[dir]; ok {
		return d, nil
	}
	if dir != "." {
		if err := c.root.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	d, err := c.root.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	if len(c.order) == dirCacheSize {
		c.open[c.order[0]].Close()
		delete(c.open, c.order[0])
		c.order = c.order[1:]
	}
	c.open[dir] = d
	c.order = append(c.order, dir)
	return d, nil
}

// reset closes every directory: a path may now lead elsewhere (an entry
// replaced what was there).
func (c *dirCache) reset() {
	for _, d := range c.open {
		d.Close()
	}
	clear(c.open)
	c.order = c.order[:0]
}

// createIn creates the file name (one path element) in the directory d,
// for writing, readable by its owner only until the caller sets its mode.
// dest is the file's path, for errors.
func createIn(d *os.File, name, dest string) (*os.File, error) {
	for {
		fd, err := unix.Openat(int(d.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "create", Path: dest, Err: err}
		}
		return os.NewFile(uintptr(fd), dest), nil
	}
}

// setTimesIn sets the access and modification times of name (one path
// element, not followed if a symlink) in the directory d to t; a zero t
// leaves them as they are, as os.Chtimes does.
func setTimesIn(d *os.File, name, dest string, t time.Time) error {
	ts := unix.Timespec{Nsec: unix.UTIME_OMIT}
	if !t.IsZero() {
		ts = unix.NsecToTimespec(t.UnixNano())
	}
	if err := unix.UtimesNanoAt(int(d.Fd()), name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "utimensat", Path: dest, Err: err}
	}
	return nil
}

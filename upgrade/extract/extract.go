// Package extract unpacks a tar stream into a directory it never leaves:
// entries with absolute paths or `..`, symlinks pointing outside, hard links
// to anything outside or not yet extracted, device files, and entries whose
// path passes through a symlink of the same archive are refused. Writes go
// through os.Root, or create a file by its own name (O_EXCL, which follows
// no symlink) in a directory opened through it, so even a missed case
// cannot touch a file outside.
package extract

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
)

// Mapper turns a cleaned archive path into the path to write relative to the
// root, or ok=false to skip the entry. Nil extracts every entry as it is.
type Mapper func(name string) (dest string, ok bool)

// Stats counts what an extraction wrote.
type Stats struct {
	Files, Dirs, Symlinks, Hardlinks int
	Bytes                            int64
}

// Options tune an extraction.
type Options struct {
	Map Mapper // nil: every entry at its own path
	// StartWriteback starts writing each file's data to disk as soon as it
	// is written (sync_file_range, without waiting), so the flush that
	// follows an extraction finds most of it done: the disk works while
	// the rest of the archive inflates.
	StartWriteback bool
}

// ErrUnsafe is wrapped by every refusal of an entry that would escape the root.
var ErrUnsafe = errors.New("unsafe tar entry")

// Tar extracts the tar stream r into root. It stops at the first error;
// the caller removes the partial tree.
func Tar(r io.Reader, root *os.Root, o Options) (Stats, error) {
	x := extractor{root: root, dirs: newDirCache(root), mapFn: o.Map, links: map[string]bool{}, chown: os.Geteuid() == 0, writeback: o.StartWriteback}
	defer x.dirs.reset()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return x.stats, nil
		}
		if err != nil {
			return x.stats, fmt.Errorf("read tar: %w", err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return x.stats, fmt.Errorf("tar entry %q: %w", hdr.Name, err)
		}
	}
}

type extractor struct {
	root      *os.Root
	dirs      *dirCache // directories files are created in
	mapFn     Mapper
	links     map[string]bool // symlinks created so far
	stats     Stats
	chown     bool
	writeback bool
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader, tar.TypeXHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
		return nil
	}
	if isSparse(hdr) {
		// A sparse entry can announce terabytes of holes in a few bytes.
		return fmt.Errorf("%w: sparse files are not allowed in a release", ErrUnsafe)
	}
	dest, ok, err := x.dest(hdr.Name)
	if err != nil || !ok {
		return err
	}
	mode := fs.FileMode(hdr.Mode).Perm() | modeBits(hdr.Mode)
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.dir(dest, mode, hdr)
	case tar.TypeReg: // tar.Reader already turns legacy TypeRegA entries into TypeReg or TypeDir
		return x.file(dest, mode, hdr, r)
	case tar.TypeSymlink:
		return x.symlink(dest, hdr)
	case tar.TypeLink:
		return x.hardlink(dest, hdr)
	default:
		return fmt.Errorf("%w: type %q (devices, fifos) is not allowed in a release", ErrUnsafe, hdr.Typeflag)
	}
}

// dest validates an archive name and maps it.
func (x *extractor) dest(name string) (string, bool, error) {
	clean, err := localPath(name)
	if err != nil {
		return "", false, err
	}
	dest := clean
	if x.mapFn != nil {
		var ok bool
		if dest, ok = x.mapFn(clean); !ok {
			return "", false, nil
		}
		if dest, err = localPath(dest); err != nil {
			return "", false, err
		}
	}
	if p := x.throughLink(dest); p != "" {
		return "", false, fmt.Errorf("%w: path passes through the symlink %q", ErrUnsafe, p)
	}
	return dest, true, nil
}

func isSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// localPath cleans an archive path and refuses absolute and escaping ones.
func localPath(name string) (string, error) {
	if strings.HasPrefix(name, "/") || strings.Contains(name, "\x00") {
		return "", fmt.Errorf("%w: absolute path", ErrUnsafe)
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return "", fmt.Errorf("%w: a path element is \"..\"", ErrUnsafe)
		}
	}
	clean := path.Clean(name)
	if clean == "." {
		return ".", nil
	}
	if !fs.ValidPath(clean) {
		return "", fmt.Errorf("%w: invalid path", ErrUnsafe)
	}
	return clean, nil
}

// throughLink returns the symlink among dest's parents, "" if none.
func (x *extractor) throughLink(dest string) string {
	for p := path.Dir(dest); p != "." && p != "/"; p = path.Dir(p) {
		if x.links[p] {
			return p
		}
	}
	return ""
}

func modeBits(m int64) fs.FileMode {
	var out fs.FileMode
	if m&04000 != 0 {
		out |= fs.ModeSetuid
	}
	if m&02000 != 0 {
		out |= fs.ModeSetgid
	}
	if m&01000 != 0 {
		out |= fs.ModeSticky
	}
	return out
}

func (x *extractor) dir(dest string, mode fs.FileMode, hdr *tar.Header) error {
	if dest == "." {
		return nil
	}
	delete(x.links, dest)
	if fi, err := x.root.Lstat(dest); err == nil && !fi.IsDir() {
		if err := x.remove(dest); err != nil {
			return err
		}
	}
	if err := x.root.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	x.stats.Dirs++
	if err := x.owner(dest, hdr); err != nil {
		return err
	}
	return x.root.Chmod(dest, mode|fs.ModeDir)
}

func (x *extractor) file(dest string, mode fs.FileMode, hdr *tar.Header, r io.Reader) error {
	dir, name := path.Dir(dest), path.Base(dest)
	d, f, err := x.create(dir, name, dest)
	if err != nil {
		return err
	}
	n, err := copyData(f, r)
	x.stats.Bytes += n
	if err == nil && x.chown { // before Chmod: chown clears setuid bits
		err = f.Chown(hdr.Uid, hdr.Gid)
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil && x.writeback && n > 0 {
		startWriteback(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	x.stats.Files++
	return setTimesIn(d, name, dest, hdr.ModTime)
}

// create creates the file dest (name in dir), replacing a file or link
// already there, and returns it with its directory.
func (x *extractor) create(dir, name, dest string) (d, f *os.File, err error) {
	if d, err = x.dirs.get(dir); err != nil {
		return nil, nil, err
	}
	f, err = createIn(d, name, dest)
	if !errors.Is(err, fs.ErrExist) {
		return d, f, err
	}
	if err := x.prepare(dest); err != nil {
		return nil, nil, err
	}
	if d, err = x.dirs.get(dir); err != nil {
		return nil, nil, err
	}
	f, err = createIn(d, name, dest)
	return d, f, err
}

// copyData writes r to f through a pooled 1 MiB buffer (f's ReadFrom would
// copy through 32 KiB ones of its own).
func copyData(f *os.File, r io.Reader) (int64, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	return io.CopyBuffer(writerOnly{f}, r, *bp)
}

// writerOnly hides its writer's ReadFrom from io.CopyBuffer.
type writerOnly struct{ io.Writer }

func (x *extractor) symlink(dest string, hdr *tar.Header) error {
	target := hdr.Linkname
	if target == "" || strings.HasPrefix(target, "/") || strings.Contains(target, "\x00") {
		return fmt.Errorf("%w: symlink to %q leaves the directory (absolute or empty target)", ErrUnsafe, target)
	}
	if !fs.ValidPath(path.Clean(path.Join(path.Dir(dest), target))) {
		return fmt.Errorf("%w: symlink to %q leaves the directory", ErrUnsafe, target)
	}
	if err := x.prepare(dest); err != nil {
		return err
	}
	if err := x.root.Symlink(target, dest); err != nil {
		return err
	}
	x.links[dest] = true
	x.stats.Symlinks++
	if x.chown {
		_ = x.root.Lchown(dest, hdr.Uid, hdr.Gid)
	}
	return nil
}

func (x *extractor) hardlink(dest string, hdr *tar.Header) error {
	src, ok, err := x.dest(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hard link target: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w: hard link to %q, which is not extracted", ErrUnsafe, hdr.Linkname)
	}
	fi, err := x.root.Lstat(src)
	if err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: hard link to %q, which is not a file extracted before it", ErrUnsafe, hdr.Linkname)
	}
	if err := x.prepare(dest); err != nil {
		return err
	}
	if err := x.root.Link(src, dest); err != nil {
		return err
	}
	x.stats.Hardlinks++
	return nil
}

// prepare creates dest's parent and removes a non-directory already at dest.
func (x *extractor) prepare(dest string) error {
	if dir := path.Dir(dest); dir != "." {
		if err := x.root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	fi, err := x.root.Lstat(dest)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("a directory of that name was extracted before")
	}
	return x.remove(dest)
}

// remove removes the non-directory dest. A directory kept open may have
// been reached through it (a link), so they are all closed.
func (x *extractor) remove(dest string) error {
	delete(x.links, dest)
	x.dirs.reset()
	return x.root.Remove(dest)
}

func (x *extractor) owner(dest string, hdr *tar.Header) error {
	if !x.chown {
		return nil
	}
	return x.root.Lchown(dest, hdr.Uid, hdr.Gid)
}

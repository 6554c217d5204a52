// Package cpio writes the "newc" cpio archives Linux unpacks as an
// initramfs, with device nodes and ownership set by the writer, so that an
// initramfs can be built without root or the cpio tool.
package cpio

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Writer writes one archive; Close writes the trailer.
type Writer struct {
	w   io.Writer
	ino uint32
	err error
}

// NewWriter starts an archive on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w, ino: 1} }

// header describes one entry.
type header struct {
	name         string
	mode         uint32 // type bits and permissions
	size         int
	major, minor uint32 // of a device node
}

func (cw *Writer) write(h header, data io.Reader) error {
	if cw.err != nil {
		return cw.err
	}
	name := strings.TrimPrefix(filepath.ToSlash(h.name), "/")
	if name == "" {
		name = "."
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		cw.ino, h.mode, 0, 0, 1, 0, h.size, 0, 0, h.major, h.minor, len(name)+1, 0)
	cw.ino++
	rec := hdr + name + "\x00"
	rec += strings.Repeat("\x00", pad(len(rec)))
	if _, cw.err = io.WriteString(cw.w, rec); cw.err != nil {
		return cw.err
	}
	if data != nil {
		n, err := io.Copy(cw.w, data)
		if err != nil {
			cw.err = err
			return err
		}
		if int(n) != h.size {
			cw.err = fmt.Errorf("cpio %s: wrote %d bytes, header says %d", name, n, h.size)
			return cw.err
		}
	}
	_, cw.err = cw.w.Write(make([]byte, pad(h.size)))
	return cw.err
}

func pad(n int) int { return (4 - n%4) % 4 }

// Dir adds a directory.
func (cw *Writer) Dir(name string, perm fs.FileMode) error {
	return cw.write(header{name: name, mode: 0o040000 | uint32(perm.Perm())}, nil)
}

// File adds a regular file with content data.
func (cw *Writer) File(name string, perm fs.FileMode, data []byte) error {
	return cw.write(header{name: name, mode: 0o100000 | uint32(perm.Perm()), size: len(data)}, strings.NewReader(string(data)))
}

// Symlink adds a symbolic link to target.
func (cw *Writer) Symlink(name, target string) error {
	return cw.write(header{name: name, mode: 0o120777, size: len(target)}, strings.NewReader(target))
}

// CharDev adds a character device node.
func (cw *Writer) CharDev(name string, perm fs.FileMode, major, minor uint32) error {
	return cw.write(header{name: name, mode: 0o020000 | uint32(perm.Perm()), major: major, minor: minor}, nil)
}

// Tree adds the tree under root (directories, regular files, symlinks),
// owned by root, named relative to root.
func (cw *Writer) Tree(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return cw.Dir(rel, info.Mode())
		case info.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return cw.Symlink(rel, t)
		case info.Mode().IsRegular():
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			return cw.write(header{name: rel, mode: 0o100000 | uint32(info.Mode().Perm()), size: int(info.Size())}, f)
		}
		return fmt.Errorf("cpio: %s: unsupported file type %s", path, info.Mode().Type())
	})
}

// Close writes the trailer; it does not close the underlying writer.
func (cw *Writer) Close() error {
	return cw.write(header{name: "TRAILER!!!"}, nil)
}

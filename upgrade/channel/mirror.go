package channel

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// mirror is a directory laid out as <dir>/<version>/<artifact>.
type mirror struct{ dir string }

func newMirror(dir string) *mirror { return &mirror{dir: dir} }

func (m *mirror) String() string { return "mirror " + m.dir }

// Latest reads <dir>/latest: a symlink to a version directory, or a file
// whose first line is the version.
func (m *mirror) Latest(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	p := filepath.Join(m.dir, "latest")
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s has no latest: create %s holding the version, or a symlink to a version directory: %w", m, p, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", m, err)
	}
	var v string
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return "", fmt.Errorf("%s: read symlink %s: %w", m, p, err)
		}
		v = filepath.Base(filepath.Clean(target))
	case fi.Mode().IsRegular():
		if v, err = readVersionFile(p); err != nil {
			return "", fmt.Errorf("%s: %w", m, err)
		}
	default:
		return "", fmt.Errorf("%s: %s must be a file holding the version or a symlink to a version directory, not a %s", m, p, fi.Mode().Type())
	}
	if err := checkVersion(v); err != nil {
		return "", fmt.Errorf("%s: %s: %w; write the version into it or point it at a version directory", m, p, err)
	}
	if fi, err := os.Stat(filepath.Join(m.dir, v)); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%s: latest names %s but %s is not a directory; copy that release into the mirror or fix %s: %w",
			m, v, filepath.Join(m.dir, v), p, ErrNotFound)
	}
	return v, nil
}

// readVersionFile returns the first non-empty line of a small file.
func readVersionFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 4096))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			return line, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	return "", fmt.Errorf("%s is empty; write the latest version into it", p)
}

// Open opens <dir>/<version>/<artifact>.
func (m *mirror) Open(ctx context.Context, version, artifact string) (io.ReadCloser, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	if err := checkVersionArtifact(version, artifact); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", m, err)
	}
	vdir := filepath.Join(m.dir, version)
	if fi, err := os.Stat(vdir); err != nil || !fi.IsDir() {
		return nil, 0, fmt.Errorf("%s: version %s not found: check that %s is a directory (versions present: %s): %w",
			m, version, vdir, listDir(m.dir, true), ErrNotFound)
	}
	p := filepath.Join(vdir, artifact)
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("%s: artifact %s of %s not found: check that %s exists (files present: %s): %w",
			m, artifact, version, p, listDir(vdir, false), ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", m, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", m, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %s is not a regular file", m, p)
	}
	return newSizedReader(ctxReader{ctx, f}, fi.Size(), p), fi.Size(), nil
}

// listDir names up to 10 entries of dir (directories only when dirs is
// set), for error messages. It skips latest and download (a `download -> .`
// link lets a web server serve the mirror in the http layout).
func listDir(dir string, dirs bool) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	var names []string
	for _, e := range entries {
		isDir := e.IsDir()
		if e.Type()&fs.ModeSymlink != 0 {
			fi, err := os.Stat(filepath.Join(dir, e.Name()))
			isDir = err == nil && fi.IsDir()
		}
		if dirs == isDir && e.Name() != "latest" && e.Name() != "download" {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return "none"
	}
	sort.Strings(names)
	if len(names) > 10 {
		names = append(names[:10], fmt.Sprintf("and %d more", len(names)-10))
	}
	return strings.Join(names, ", ")
}

package upgrade_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/channel"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/release"
	"slipway.dev/slipway/upgrade/releasetest"
)

const arch = "amd64"

// env is a mirror holding v1 and v2 and an empty system directory.
type env struct {
	mirror, sys, lock string
	src               channel.Source
	rels              map[string]*releasetest.Release
}

func newEnv(t *testing.T, versions ...string) *env {
	t.Helper()
	if len(versions) == 0 {
		versions = []string{"v1", "v2"}
	}
	e := &env{mirror: t.TempDir(), sys: filepath.Join(t.TempDir(), "system"), lock: filepath.Join(t.TempDir(), "upgrade.lock"), rels: map[string]*releasetest.Release{}}
	for _, v := range versions {
		rel, err := releasetest.Write(releasetest.Options{Mirror: e.mirror, Version: v, Arch: arch, RootfsFiles: 40})
		if err != nil {
			t.Fatal(err)
		}
		e.rels[v] = rel
	}
	src, err := channel.New(e.mirror, channel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.src = src
	return e
}

func (e *env) opts(version string, comps ...layout.Component) upgrade.Options {
	return upgrade.Options{SystemDir: e.sys, Source: e.src, Version: version, Components: comps, Arch: arch, LockFile: e.lock}
}

func (e *env) run(t *testing.T, version string, comps ...layout.Component) *upgrade.Result {
	t.Helper()
	res, err := upgrade.Run(context.Background(), e.opts(version, comps...))
	if err != nil {
		t.Fatalf("upgrade to %s: %v", version, err)
	}
	return res
}

// artifact returns the path of an artifact of version in the mirror.
func (e *env) artifact(version, name string) string { return filepath.Join(e.mirror, version, name) }

// rewriteSums recomputes sha256sum-<arch>.txt of version after a test
// changed an artifact on purpose.
func (e *env) rewriteSums(t *testing.T, version string) {
	t.Helper()
	dir := filepath.Join(e.mirror, version)
	sums := release.Sums{}
	var names []string
	for _, n := range []string{release.RootfsArtifact(arch), release.KernelArtifact(arch), release.InitrdArtifact(arch), release.KernelVersionArtifact(arch)} {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			continue
		}
		s := sha256.Sum256(b)
		sums[n] = hex.EncodeToString(s[:])
		names = append(names, n)
	}
	f, err := os.Create(filepath.Join(dir, release.SumsArtifact(arch)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := release.Format(f, sums, names); err != nil {
		t.Fatal(err)
	}
}

// treeDigest hashes every path, mode, link target and file content under dir.
func treeDigest(t testing.TB, dir string) string {
	t.Helper()
	h := sha256.New()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == dir {
				return fs.SkipAll
			}
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		line := fmt.Sprintf("%s %v", rel, fi.Mode())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			fh := sha256.New()
			_, _ = io.Copy(fh, f)
			f.Close()
			line += " " + hex.EncodeToString(fh.Sum(nil))
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	h.Write([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(h.Sum(nil))
}

func link(t *testing.T, sys string, c layout.Component, name string) string {
	t.Helper()
	v, err := layout.New(sys).Link(c, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// unchanged runs fn and fails unless the system directory is byte-for-byte
// as before; it returns fn's error.
func unchanged(t *testing.T, sys string, fn func() error) error {
	t.Helper()
	before := treeDigest(t, sys)
	err := fn()
	if after := treeDigest(t, sys); after != before {
		t.Fatalf("system directory changed on failure (%v)", err)
	}
	return err
}

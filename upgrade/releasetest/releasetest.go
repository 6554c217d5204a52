// Package releasetest writes k3os-format releases into a mirror directory:
// <mirror>/<version>/{k3os-rootfs-<arch>.tar.gz, k3os-kernel-<arch>.squashfs,
// k3os-initrd-<arch>, k3os-kernel-version-<arch>, sha256sum-<arch>.txt} and
// <mirror>/latest. Contents are generated (sizes configurable) or copied from
// caller-supplied files. Host tests, the demo, the cluster tests and the
// benchmarks use it; internal/cmd/mkrelease exposes it to scripts.
package releasetest

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"

	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/release"
)

// Options describe one release.
type Options struct {
	Mirror  string // the mirror directory; created if missing
	Version string // the release (and rootfs) version, e.g. v1.2.3
	Arch    string // default: this machine's

	K3sVersion    string // default "<version>-k3s1"
	KernelVersion string // default "5.15.0-<version>"

	// Generated content sizes. RootfsBytes is the uncompressed size of the
	// payload spread over RootfsFiles files under k3os/<version>/ (defaults
	// 64 KiB and 16); the other sizes default to a few KiB.
	RootfsBytes int64
	RootfsFiles int
	K3sBytes    int64
	KernelBytes int64
	InitrdBytes int64
	GzipLevel   int   // default gzip.DefaultCompression
	Seed        int64 // content seed; default derived from Version

	// Caller-supplied files, copied instead of generated (paths on disk).
	K3osBinary, K3sBinary, Kernel, Initrd string

	NoLatest bool // leave <mirror>/latest alone
}

// Release is what Write produced.
type Release struct {
	Dir, Version, Arch, K3sVersion, KernelVersion string
	Sums                                          release.Sums // artifact name -> sha256 hex
}

// Write creates the release and returns its description. An existing
// release of the same version is overwritten.
func Write(o Options) (*Release, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	dir := filepath.Join(o.Mirror, o.Version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create release dir: %w", err)
	}
	r := &Release{Dir: dir, Version: o.Version, Arch: o.Arch, K3sVersion: o.K3sVersion, KernelVersion: o.KernelVersion, Sums: release.Sums{}}
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x5eed))
	steps := []struct {
		name  string
		write func(io.Writer) error
	}{
		{release.RootfsArtifact(o.Arch), func(w io.Writer) error { return writeRootfs(w, o, rng) }},
		{release.KernelArtifact(o.Arch), content(o.Kernel, o.KernelBytes, rng)},
		{release.InitrdArtifact(o.Arch), content(o.Initrd, o.InitrdBytes, rng)},
		{release.KernelVersionArtifact(o.Arch), func(w io.Writer) error { _, err := io.WriteString(w, o.KernelVersion+"\n"); return err }},
	}
	var names []string
	for _, s := range steps {
		sum, err := writeFile(filepath.Join(dir, s.name), s.write)
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", s.name, err)
		}
		r.Sums[s.name] = sum
		names = append(names, s.name)
	}
	sort.Strings(names)
	if _, err := writeFile(filepath.Join(dir, release.SumsArtifact(o.Arch)), func(w io.Writer) error {
		return release.Format(w, r.Sums, names)
	}); err != nil {
		return nil, err
	}
	if !o.NoLatest {
		if err := SetLatest(o.Mirror, o.Version); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// SetLatest writes <mirror>/latest naming version.
func SetLatest(mirror, version string) error {
	if err := os.WriteFile(filepath.Join(mirror, "latest"), []byte(version+"\n"), 0o644); err != nil {
		return fmt.Errorf("write latest: %w", err)
	}
	return nil
}

func (o *Options) defaults() error {
	if o.Mirror == "" {
		return errors.New("releasetest: Mirror is required")
	}
	if err := layout.ValidVersion(o.Version); err != nil {
		return err
	}
	if o.Arch == "" {
		o.Arch = release.Arch()
	}
	if o.K3sVersion == "" {
		o.K3sVersion = o.Version + "-k3s1"
	}
	if o.KernelVersion == "" {
		o.KernelVersion = "5.15.0-" + o.Version
	}
	for _, v := range []string{o.K3sVersion, o.KernelVersion} {
		if err := layout.ValidVersion(v); err != nil {
			return err
		}
	}
	def := func(p *int64, v int64) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&o.RootfsBytes, 64<<10)
	def(&o.K3sBytes, 8<<10)
	def(&o.KernelBytes, 16<<10)
	def(&o.InitrdBytes, 8<<10)
	if o.RootfsFiles <= 0 {
		o.RootfsFiles = 16
	}
	if o.GzipLevel == 0 {
		o.GzipLevel = gzip.DefaultCompression
	}
	if o.Seed == 0 {
		for _, c := range o.Version {
			o.Seed = o.Seed*31 + int64(c)
		}
	}
	return nil
}

// writeFile writes path through fn and returns the sha256 of what was written.
func writeFile(path string, fn func(io.Writer) error) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	err = fn(io.MultiWriter(f, h))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// content copies a caller-supplied file, or generates size bytes.
func content(path string, size int64, rng *rand.Rand) func(io.Writer) error {
	return func(w io.Writer) error {
		if path == "" {
			return fill(w, size, rng)
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(w, f)
		return err
	}
}

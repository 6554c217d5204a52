package upgrade

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"

	"slipway.dev/slipway/upgrade/extract"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/release"
)

// stagingPrefix names the temporary folders inside the system directory.
const stagingPrefix = ".slipway-staging-"

// download is an opened artifact.
type download struct {
	name string
	rc   io.ReadCloser
	size int64
}

// open opens the artifacts the staged components need.
func (p *plan) open(ctx context.Context) ([]*download, error) {
	arch := p.o.Arch
	var names []string
	if p.staging(layout.Rootfs) || p.staging(layout.K3s) {
		names = append(names, release.RootfsArtifact(arch))
	}
	if p.staging(layout.Kernel) {
		names = append(names, release.KernelArtifact(arch), release.InitrdArtifact(arch))
	}
	var out []*download
	for _, n := range names {
		rc, size, err := p.o.Source.Open(ctx, p.version, n)
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("release %s: %w", p.version, err)
		}
		if p.o.Progress != nil {
			rc = p.o.Progress.Wrap(rc, n, size)
		}
		out = append(out, &download{name: n, rc: rc, size: size})
	}
	return out, nil
}

func closeAll(ds []*download) {
	for _, d := range ds {
		d.rc.Close()
	}
}

func (p *plan) staging(c layout.Component) bool {
	cp := p.comp(c)
	return cp != nil && cp.action == ActionStage
}

func (p *plan) comp(c layout.Component) *compPlan {
	for _, cp := range p.comps {
		if cp.c == c {
			return cp
		}
	}
	return nil
}

// hashReader hashes and counts what is read through it.
type hashReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func newHashReader(r io.Reader) *hashReader { return &hashReader{r: r, h: sha256.New()} }

func (h *hashReader) Read(b []byte) (int, error) {
	n, err := h.r.Read(b)
	h.h.Write(b[:n])
	h.n += int64(n)
	return n, err
}

// finish reads what is left, then compares size and digest.
func (h *hashReader) finish(d *download, want string) error {
	if _, err := io.Copy(io.Discard, h); err != nil {
		return fmt.Errorf("%w: download of %s: %v", ErrVerify, d.name, err)
	}
	if d.size >= 0 && h.n != d.size {
		return fmt.Errorf("%w: %s is %d bytes, expected %d; the download was cut short, retry", ErrVerify, d.name, h.n, d.size)
	}
	if got := hex.EncodeToString(h.h.Sum(nil)); got != want {
		return mismatch(d.name, want, got)
	}
	return nil
}

// stageRootfs verifies and extracts the rootfs tarball in one pass: the
// chosen k3os/<version> and k3s/<k3s-version> folders land under stage.
// Whatever the tar stream says, the digest decides: a mismatch is reported
// as such even when it also broke the extraction.
func (p *plan) stageRootfs(d *download, stage string) error {
	hr := newHashReader(d.rc)
	root, err := os.OpenRoot(stage)
	if err != nil {
		return err
	}
	defer root.Close()
	var k3s []string
	xerr := func() error {
		zr, err := inflate(bufio.NewReaderSize(hr, 1<<20))
		if err != nil {
			return err
		}
		defer zr.Close() // before hr.finish: the inflating goroutine reads hr
		if _, err := extract.Tar(zr, root, extract.Options{Map: p.rootfsMapper(&k3s), StartWriteback: true}); err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, zr) // the gzip trailer: checks its CRC
		return err
	}()
	if err := hr.finish(d, p.sums[d.name]); err != nil {
		return err
	}
	if xerr != nil {
		return fmt.Errorf("unpack %s: %w", d.name, xerr)
	}
	return p.checkRootfs(stage, k3s, d.name)
}

// rootfsMapper maps `<v>/k3os/system/<component>/<version>/...` to
// `<component>/<version>/...` for the components being staged; links such as
// `current` and `<v>/sbin/*` are skipped (slipway sets its own links).
func (p *plan) rootfsMapper(k3s *[]string) extract.Mapper {
	started := false
	return func(name string) (string, bool) {
		parts := strings.Split(name, "/")
		if len(parts) < release.RootfsStrip+2 || parts[1] != "k3os" || parts[2] != "system" {
			return "", false
		}
		c, v := layout.Component(parts[3]), parts[4]
		if layout.ValidVersion(v) != nil || v == layout.CurrentLink || v == layout.PreviousLink || !p.staging(c) {
			return "", false
		}
		switch c {
		case layout.Rootfs:
			if v != p.version {
				return "", false
			}
		case layout.K3s:
			if len(*k3s) == 0 || (*k3s)[len(*k3s)-1] != v {
				*k3s = append(*k3s, v)
			}
		default:
			return "", false
		}
		if !started {
			started = true
			p.o.Hook("extracting")
		}
		return strings.Join(parts[release.RootfsStrip:], "/"), true
	}
}

// checkRootfs makes sure the tarball held what was asked for.
func (p *plan) checkRootfs(stage string, k3s []string, name string) error {
	if p.staging(layout.Rootfs) {
		if _, err := os.Stat(filepath.Join(stage, string(layout.Rootfs), p.version)); err != nil {
			return fmt.Errorf("%s holds no k3os/%s folder: it is not a k3os rootfs of %s", name, p.version, p.version)
		}
	}
	if p.staging(layout.K3s) {
		uniq := map[string]bool{}
		for _, v := range k3s {
			uniq[v] = true
		}
		if len(uniq) != 1 {
			return fmt.Errorf("%s holds %d k3s versions (%v), want exactly one", name, len(uniq), k3s)
		}
		p.comp(layout.K3s).to = k3s[0]
	}
	return nil
}

// stageFile copies an artifact to dest, verifying it on the way.
func stageFile(d *download, dest, want string) error {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	hr := newHashReader(d.rc)
	_, err = io.CopyBuffer(f, hr, make([]byte, 1<<20))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if ferr := hr.finish(d, want); ferr != nil {
		return ferr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", dest, noSpace(err))
	}
	return nil
}

// noSpace marks ENOSPC as ErrNoSpace.
func noSpace(err error) error {
	if isNoSpace(err) {
		return fmt.Errorf("%w: %v; free space in the system directory and retry", ErrNoSpace, err)
	}
	return err
}

package upgrade

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/release"
)

// plan is what one upgrade will do, decided before anything changes.
type plan struct {
	o       *Options
	l       layout.Layout
	version string
	sums    release.Sums
	kver    string
	comps   []*compPlan
}

type compPlan struct {
	c        layout.Component
	from, to string
	action   Action
	sums     map[string]string // digests of the artifacts it comes from
}

// newPlan resolves the version, reads the release's checksums (and kernel
// version) and decides an action for each chosen component.
func newPlan(ctx context.Context, o *Options) (*plan, error) {
	p := &plan{o: o, l: layout.New(o.SystemDir), version: o.Version}
	if p.version == "" || p.version == "latest" {
		v, err := o.Source.Latest(ctx)
		if err != nil {
			return nil, fmt.Errorf("resolve latest on %s: %w", o.Source, err)
		}
		slog.Info("resolved latest", "source", o.Source.String(), "version", v)
		p.version = v
	}
	if err := layout.ValidVersion(p.version); err != nil {
		return nil, err
	}
	if err := p.readSums(ctx); err != nil {
		return nil, err
	}
	for _, c := range o.Components {
		cp, err := p.decide(ctx, c)
		if err != nil {
			return nil, err
		}
		p.comps = append(p.comps, cp)
	}
	return p, nil
}

func (p *plan) readSums(ctx context.Context) error {
	name := release.SumsArtifact(p.o.Arch)
	rc, _, err := p.o.Source.Open(ctx, p.version, name)
	if err != nil {
		return fmt.Errorf("release %s on %s: %w (check --version and --arch)", p.version, p.o.Source, err)
	}
	defer rc.Close()
	p.sums, err = release.ParseSums(rc)
	if err != nil {
		return fmt.Errorf("%w: %s of %s: %v", ErrVerify, name, p.version, err)
	}
	return nil
}

// need returns the digests of artifacts, failing when the checksum file
// does not list one (it could not be verified).
func (p *plan) need(artifacts ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range artifacts {
		s, ok := p.sums[a]
		if !ok {
			return nil, fmt.Errorf("%w: %s of %s does not list %s, so it cannot be verified; fix the release", ErrVerify, release.SumsArtifact(p.o.Arch), p.version, a)
		}
		out[a] = s
	}
	return out, nil
}

func (p *plan) decide(ctx context.Context, c layout.Component) (*compPlan, error) {
	arch := p.o.Arch
	cp := &compPlan{c: c}
	var err error
	switch c {
	case layout.Rootfs:
		cp.to = p.version
		cp.sums, err = p.need(release.RootfsArtifact(arch))
	case layout.K3s:
		cp.sums, err = p.need(release.RootfsArtifact(arch))
	case layout.Kernel:
		cp.sums, err = p.need(release.KernelArtifact(arch), release.InitrdArtifact(arch), release.KernelVersionArtifact(arch))
		if err == nil {
			cp.to, err = p.kernelVersion(ctx)
		}
	default:
		err = fmt.Errorf("unknown component %q: choose k3os (rootfs), kernel or k3s", c)
	}
	if err != nil {
		return nil, err
	}
	if cp.from, err = p.l.Current(c); err != nil {
		return nil, err
	}
	st := State{Current: cp.from, Target: cp.to, CurrentMarker: p.marker(c, cp.from)}
	if c == layout.K3s {
		st.Target = p.findMarked(c, cp.sums)
	}
	st.TargetMarker = p.marker(c, st.Target)
	st.TargetPresent = st.Target != "" && exists(p.l.VersionDir(c, st.Target))
	cp.action = Decide(c, p.version, st, cp.sums)
	if cp.to == "" {
		cp.to = st.Target
	}
	if cp.action == ActionCurrent {
		cp.to = cp.from
	}
	return cp, nil
}

func (p *plan) marker(c layout.Component, version string) *Marker {
	if version == "" {
		return nil
	}
	return readMarker(p.l.VersionDir(c, version))
}

// findMarked returns the version folder of c installed from this release.
func (p *plan) findMarked(c layout.Component, sums map[string]string) string {
	ents, _ := os.ReadDir(p.l.Dir(c))
	for _, e := range ents {
		if e.IsDir() && layout.ValidVersion(e.Name()) == nil && readMarker(filepath.Join(p.l.Dir(c), e.Name())).matches(p.version, sums) {
			return e.Name()
		}
	}
	return ""
}

// kernelVersion reads and verifies k3os-kernel-version-<arch>.
func (p *plan) kernelVersion(ctx context.Context) (string, error) {
	if p.kver != "" {
		return p.kver, nil
	}
	name := release.KernelVersionArtifact(p.o.Arch)
	rc, _, err := p.o.Source.Open(ctx, p.version, name)
	if err != nil {
		return "", fmt.Errorf("release %s: %w", p.version, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 4096))
	if err != nil {
		return "", fmt.Errorf("%w: read %s: %v", ErrVerify, name, err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != p.sums[name] {
		return "", mismatch(name, p.sums[name], got)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	p.kver = strings.TrimSpace(string(line))
	if err := layout.ValidVersion(p.kver); err != nil {
		return "", fmt.Errorf("%s names kernel version %q: %w", name, p.kver, err)
	}
	return p.kver, nil
}

func mismatch(name, want, got string) error {
	return fmt.Errorf("%w: %s has sha256 %s but the release lists %s; the download is corrupt or was tampered with, retry or check the mirror", ErrVerify, name, got, want)
}

// result reports the plan (or, after apply, what was done).
func (p *plan) result() *Result {
	r := &Result{SystemDir: p.o.SystemDir, Source: p.o.Source.String(), Version: p.version, DryRun: p.o.DryRun, AlreadyCurrent: true}
	for _, cp := range p.comps {
		r.Components = append(r.Components, ComponentResult{Component: cp.c, From: cp.from, To: cp.to, Action: cp.action})
		if cp.action != ActionCurrent {
			r.AlreadyCurrent = false
		}
	}
	return r
}

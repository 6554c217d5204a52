package upgrade_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/channel"
	"slipway.dev/slipway/upgrade/extract"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/release"
)

// An https channel whose server cuts the rootfs download short.
func TestTruncatedHTTPDownload(t *testing.T) {
	e := newEnv(t)
	e.run(t, "v1")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/releases/latest" {
			http.Redirect(w, r, "/releases/tag/v2", http.StatusFound)
			return
		}
		rest, ok := strings.CutPrefix(r.URL.Path, "/releases/download/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		b, err := os.ReadFile(filepath.Join(e.mirror, filepath.FromSlash(rest)))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		if strings.HasSuffix(rest, ".tar.gz") {
			b = b[:len(b)/2] // the server dies half-way
		}
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	src, err := channel.New(srv.URL+"/releases/latest", channel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := e.opts("latest")
	o.Source = src
	err = unchanged(t, e.sys, func() error { _, err := upgrade.Run(context.Background(), o); return err })
	if !errors.Is(err, upgrade.ErrVerify) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("err = %v, want a truncation reported as ErrVerify", err)
	}
}

// A rootfs tarball with a correct checksum but an entry escaping the
// staging folder is refused, and nothing outside changes.
func TestUnsafeTarballRefused(t *testing.T) {
	for name, hdr := range map[string]*tar.Header{
		"dotdot":   {Name: "v2/k3os/system/k3os/v2/../../../../../evil", Typeflag: tar.TypeReg, Mode: 0o644},
		"symlink":  {Name: "v2/k3os/system/k3os/v2/escape", Typeflag: tar.TypeSymlink, Linkname: "../../../../etc"},
		"hardlink": {Name: "v2/k3os/system/k3os/v2/passwd", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.run(t, "v1")
			writeTarGz(t, e.artifact("v2", release.RootfsArtifact(arch)),
				&tar.Header{Name: "v2/k3os/system/k3os/v2/", Typeflag: tar.TypeDir, Mode: 0o755},
				&tar.Header{Name: "v2/k3os/system/k3os/v2/k3os", Typeflag: tar.TypeReg, Mode: 0o755},
				hdr)
			e.rewriteSums(t, "v2")
			parent := filepath.Dir(e.sys)
			before := treeDigest(t, parent)
			_, err := upgrade.Run(context.Background(), e.opts("v2"))
			if !errors.Is(err, extract.ErrUnsafe) {
				t.Fatalf("err = %v, want ErrUnsafe", err)
			}
			if treeDigest(t, parent) != before {
				t.Fatal("the refused tarball changed files")
			}
		})
	}
}

func writeTarGz(t *testing.T, path string, hdrs ...*tar.Header) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRollbackAndStatus(t *testing.T) {
	e := newEnv(t)
	e.run(t, "v1", layout.Rootfs, layout.Kernel, layout.K3s)
	r := upgrade.RollbackOptions{SystemDir: e.sys, LockFile: e.lock}
	err := unchanged(t, e.sys, func() error { _, err := upgrade.Rollback(context.Background(), r); return err })
	if !errors.Is(err, upgrade.ErrNoRollback) || upgrade.ExitCode(err) != upgrade.ExitNoRollback {
		t.Fatalf("rollback without previous: %v", err)
	}
	e.run(t, "v2", layout.Rootfs, layout.Kernel, layout.K3s)

	r.Components = []layout.Component{layout.Rootfs, layout.K3s}
	res, err := upgrade.Rollback(context.Background(), r)
	if err != nil || len(res.Components) != 2 {
		t.Fatalf("%+v %v", res, err)
	}
	st, err := upgrade.Status(upgrade.StatusOptions{SystemDir: e.sys})
	if err != nil {
		t.Fatal(err)
	}
	want := map[layout.Component][2]string{
		layout.Rootfs: {"v1", "v2"}, layout.K3s: {"v1-k3s1", "v2-k3s1"}, layout.Kernel: {"5.15.0-v2", "5.15.0-v1"},
	}
	for _, cs := range st.Components {
		if w := want[cs.Component]; cs.Current != w[0] || cs.Previous != w[1] || len(cs.Installed) != 2 {
			t.Errorf("%s: %+v, want current/previous %v", cs.Component, cs, w)
		}
	}
	var text bytes.Buffer
	if err := st.WriteText(&text); err != nil || !strings.Contains(text.String(), "k3os       v1         v2") {
		t.Fatalf("status text:\n%s", text.String())
	}

	// previous points at a folder that is gone: refused, nothing changes.
	if err := os.RemoveAll(filepath.Join(e.sys, "k3os", "v2")); err != nil {
		t.Fatal(err)
	}
	r.Components = nil
	err = unchanged(t, e.sys, func() error { _, err := upgrade.Rollback(context.Background(), r); return err })
	if !errors.Is(err, upgrade.ErrNoRollback) {
		t.Fatalf("rollback to a missing folder: %v", err)
	}
	if _, err := upgrade.Status(upgrade.StatusOptions{SystemDir: filepath.Join(e.sys, "nope")}); err == nil {
		t.Fatal("status of a missing dir: want an error")
	}
}

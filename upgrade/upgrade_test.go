package upgrade_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/release"
)

func TestFirstInstallThenUpgrade(t *testing.T) {
	e := newEnv(t)
	res := e.run(t, "v1", layout.Rootfs, layout.Kernel, layout.K3s)
	if res.AlreadyCurrent || len(res.Components) != 3 {
		t.Fatalf("result %+v", res)
	}
	for c, want := range map[layout.Component]string{layout.Rootfs: "v1", layout.Kernel: "5.15.0-v1", layout.K3s: "v1-k3s1"} {
		if got := link(t, e.sys, c, "current"); got != want {
			t.Errorf("%s current = %q, want %q", c, got, want)
		}
		if got := link(t, e.sys, c, "previous"); got != "" {
			t.Errorf("%s previous = %q after a first install", c, got)
		}
	}
	for _, p := range []string{"k3os/v1/k3os", "k3os/v1/lib/00/file-00039.so", "kernel/5.15.0-v1/kernel.squashfs", "kernel/5.15.0-v1/initrd", "k3s/v1-k3s1/k3s", "k3s/v1-k3s1/k3s-install.sh"} {
		if _, err := os.Stat(filepath.Join(e.sys, p)); err != nil {
			t.Error(err)
		}
	}
	kernel, _ := os.ReadFile(filepath.Join(e.sys, "kernel/5.15.0-v1/kernel.squashfs"))
	want, _ := os.ReadFile(e.artifact("v1", release.KernelArtifact(arch)))
	if string(kernel) != string(want) {
		t.Error("kernel.squashfs differs from the artifact")
	}
	if m, _ := filepath.Glob(filepath.Join(e.sys, ".slipway-staging-*")); len(m) != 0 {
		t.Errorf("staging left behind: %v", m)
	}

	e.run(t, "latest", layout.Rootfs, layout.Kernel, layout.K3s)
	for c, want := range map[layout.Component][2]string{
		layout.Rootfs: {"v2", "v1"}, layout.Kernel: {"5.15.0-v2", "5.15.0-v1"}, layout.K3s: {"v2-k3s1", "v1-k3s1"},
	} {
		if cur, prev := link(t, e.sys, c, "current"), link(t, e.sys, c, "previous"); cur != want[0] || prev != want[1] {
			t.Errorf("%s current/previous = %s/%s, want %s/%s", c, cur, prev, want[0], want[1])
		}
	}
}

func TestDefaultComponentsLeaveK3sAlone(t *testing.T) {
	e := newEnv(t)
	res := e.run(t, "v1")
	if len(res.Components) != 2 {
		t.Fatalf("default components: %+v", res.Components)
	}
	if _, err := os.Stat(filepath.Join(e.sys, "k3s")); !os.IsNotExist(err) {
		t.Fatal("k3s installed although not chosen")
	}
}

func TestAlreadyCurrentIsANoOp(t *testing.T) {
	e := newEnv(t)
	e.run(t, "v2", layout.Rootfs, layout.Kernel, layout.K3s)
	var res *upgrade.Result
	err := unchanged(t, e.sys, func() error {
		var err error
		res, err = upgrade.Run(context.Background(), e.opts("v2", layout.Rootfs, layout.Kernel, layout.K3s))
		return err
	})
	if err != nil || !res.AlreadyCurrent {
		t.Fatalf("second run: %+v, %v", res, err)
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	e := newEnv(t)
	e.run(t, "v1")
	o := e.opts("v2")
	o.DryRun = true
	var res *upgrade.Result
	if err := unchanged(t, e.sys, func() (err error) { res, err = upgrade.Run(context.Background(), o); return }); err != nil {
		t.Fatal(err)
	}
	if res.AlreadyCurrent || res.Components[0].Action != upgrade.ActionStage || res.Components[0].To != "v2" {
		t.Fatalf("dry run plan %+v", res.Components)
	}
}

// Back at a version still installed (after a rollback), the upgrade only
// relinks: it does not even open the rootfs artifact.
func TestReuseInstalledVersion(t *testing.T) {
	e := newEnv(t)
	e.run(t, "v1")
	e.run(t, "v2")
	if _, err := upgrade.Rollback(context.Background(), upgrade.RollbackOptions{SystemDir: e.sys, LockFile: e.lock}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.artifact("v2", release.RootfsArtifact(arch))); err != nil {
		t.Fatal(err)
	}
	res := e.run(t, "v2")
	if res.Components[0].Action != upgrade.ActionReuse || link(t, e.sys, layout.Rootfs, "current") != "v2" {
		t.Fatalf("%+v", res.Components)
	}
}

// A <version> folder left incomplete (no completion marker) is replaced.
func TestIncompleteVersionFolderIsReplaced(t *testing.T) {
	e := newEnv(t)
	e.run(t, "v1")
	partial := filepath.Join(e.sys, "k3os", "v2")
	if err := os.MkdirAll(filepath.Join(partial, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, "k3os"), []byte("half"), 0o755); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(e.sys, ".slipway-staging-123")
	if err := os.MkdirAll(filepath.Join(stale, "k3os"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.run(t, "v2")
	if b, _ := os.ReadFile(filepath.Join(partial, "k3os")); string(b) == "half" {
		t.Fatal("incomplete folder kept")
	}
	if _, err := os.Stat(filepath.Join(partial, upgrade.MarkerFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatal("leftover staging folder not removed")
	}
}

func TestFailuresLeaveSystemDirUnchanged(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version string
		break_  func(t *testing.T, e *env)
		want    error
		msg     string
	}{
		{"rootfs checksum mismatch", "v2", func(t *testing.T, e *env) { flipByte(t, e.artifact("v2", release.RootfsArtifact(arch)), 200) }, upgrade.ErrVerify, "sha256"},
		{"kernel checksum mismatch", "v2", func(t *testing.T, e *env) { flipByte(t, e.artifact("v2", release.KernelArtifact(arch)), 10) }, upgrade.ErrVerify, "corrupt"},
		{"truncated initrd", "v2", func(t *testing.T, e *env) { truncate(t, e.artifact("v2", release.InitrdArtifact(arch))) }, upgrade.ErrVerify, "sha256"},
		{"truncated rootfs", "v2", func(t *testing.T, e *env) { truncate(t, e.artifact("v2", release.RootfsArtifact(arch))) }, upgrade.ErrVerify, ""},
		{"missing artifact", "v2", func(t *testing.T, e *env) { rm(t, e.artifact("v2", release.InitrdArtifact(arch))) }, upgrade.ErrNotFound, ""},
		{"missing checksum file", "v2", func(t *testing.T, e *env) { rm(t, e.artifact("v2", release.SumsArtifact(arch))) }, upgrade.ErrNotFound, ""},
		{"unlisted artifact", "v2", func(t *testing.T, e *env) {
			rm(t, e.artifact("v2", release.InitrdArtifact(arch)))
			e.rewriteSums(t, "v2")
		}, upgrade.ErrVerify, "does not list"},
		{"unknown version", "v9", func(*testing.T, *env) {}, upgrade.ErrNotFound, "v9"},
		{"not a k3os rootfs", "v2", func(t *testing.T, e *env) {
			copyFile(t, e.artifact("v1", release.RootfsArtifact(arch)), e.artifact("v2", release.RootfsArtifact(arch)))
			e.rewriteSums(t, "v2")
		}, nil, "no k3os/v2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.run(t, "v1", layout.Rootfs, layout.Kernel, layout.K3s)
			tc.break_(t, e)
			err := unchanged(t, e.sys, func() error {
				_, err := upgrade.Run(context.Background(), e.opts(tc.version, layout.Rootfs, layout.Kernel, layout.K3s))
				return err
			})
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v; want %v containing %q", err, tc.want, tc.msg)
			}
			t.Logf("error: %v", err)
		})
	}
}

func flipByte(t *testing.T, p string, off int64) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func truncate(t *testing.T, p string) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
}

func rm(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

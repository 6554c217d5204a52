package reboot

import (
	"os"
	"path/filepath"
	"testing"
)

func TestBootedFrom(t *testing.T) {
	const release = "5.15.0-91-generic"
	cases := []struct {
		name            string
		host            Host
		rootfs, kernels []string
		want            bool
	}{
		{"stage-0 booted one of its rootfs", Host{Cmdline: "console=ttyS0 slipway.rootfs=v1 slipway.kernel=v1", KernelRelease: "6.1"}, []string{"v1", "v2", "current"}, nil, true},
		{"stage-0 booted another directory's rootfs", Host{Cmdline: "slipway.rootfs=v7", KernelRelease: release}, []string{"v1", "v2"}, []string{release}, false},
		{"k3os loader, running kernel present", Host{Cmdline: "k3os.mode=local", KernelRelease: release}, []string{"v0.21.5"}, []string{release, "current"}, true},
		{"a workstation trying a directory", Host{Cmdline: "BOOT_IMAGE=/vmlinuz root=/dev/sda1", KernelRelease: "6.1.0-28-amd64"}, []string{"v1", "v2"}, []string{"5.4.0-k3os"}, false},
		{"an empty directory", Host{KernelRelease: release}, nil, nil, false},
		{"links are not versions", Host{Cmdline: "slipway.rootfs=current"}, []string{"current"}, nil, false},
		{"nothing known of the host", Host{}, []string{"v1"}, []string{"v1"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, why := bootedFrom(c.host, c.rootfs, c.kernels)
			if got != c.want || why == "" {
				t.Errorf("bootedFrom = %v (%q), want %v", got, why, c.want)
			}
		})
	}
}

// BootedFrom reads the directory's k3os/ and kernel/ folders.
func TestBootedFromReadsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "kernel", "6.1.0-x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if ok, why := BootedFrom(dir, Host{KernelRelease: "6.1.0-x"}); !ok {
		t.Errorf("running kernel present: not booted (%s)", why)
	}
	if ok, _ := BootedFrom(dir, Host{KernelRelease: "6.1.0-y"}); ok {
		t.Error("another kernel: booted")
	}
	if ok, _ := BootedFrom(filepath.Join(dir, "missing"), Host{KernelRelease: "6.1.0-x"}); ok {
		t.Error("a missing directory: booted")
	}
}

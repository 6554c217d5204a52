package reboot

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"slipway.dev/slipway/upgrade/boot"
)

// Host is what a running host says about how it booted.
type Host struct {
	// Cmdline is the kernel command line (/proc/cmdline).
	Cmdline string
	// KernelRelease is the running kernel's release (uname -r).
	KernelRelease string
}

// ReadHost reads the running host's command line and kernel release.
func ReadHost() Host {
	var h Host
	if b, err := os.ReadFile("/proc/cmdline"); err == nil {
		h.Cmdline = strings.TrimSpace(string(b))
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		h.KernelRelease = unix.ByteSliceToString(u.Release[:])
	}
	return h
}

// BootedFrom says whether systemDir is the system directory h booted from,
// and why, in words for the user. Only then is a reboot after an upgrade
// the default: an upgrade of another directory (an image being prepared, a
// try on a workstation) must never reboot the machine it runs on.
func BootedFrom(systemDir string, h Host) (bool, string) {
	return bootedFrom(h, list(filepath.Join(systemDir, "k3os")), list(filepath.Join(systemDir, "kernel")))
}

// bootedFrom decides from the host and the versions a system directory
// holds (its k3os/ and kernel/ entries):
//   - booted by slipway's stage-0 (slipway.rootfs=V on the command line): the
//     directory holds rootfs V;
//   - booted by k3os's own loader: the directory holds the running kernel,
//     whose folder k3os names by its release (kernel/<uname -r>).
func bootedFrom(h Host, rootfs, kernels []string) (bool, string) {
	if v := boot.CmdlineValue(h.Cmdline, boot.ArgRootfs); v != "" {
		if contains(rootfs, v) {
			return true, fmt.Sprintf("this host booted rootfs %s from it", v)
		}
		return false, fmt.Sprintf("this host booted rootfs %s, which it does not hold: it is not the system directory this host booted from", v)
	}
	if h.KernelRelease != "" && contains(kernels, h.KernelRelease) {
		return true, fmt.Sprintf("it holds the running kernel %s", h.KernelRelease)
	}
	return false, fmt.Sprintf("it holds neither the running kernel (%s) nor a rootfs this host booted: it is not the system directory this host booted from", orUnknown(h.KernelRelease))
}

// list returns the names in dir, none when it cannot be read.
func list(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s && s != "current" && s != "previous" {
			return true
		}
	}
	return false
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

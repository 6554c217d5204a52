package build

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"slipway.dev/slipway/images/oci"
)

// NodePackages are the Debian packages of the real node's container
// runtime (containerd 1.6 speaks CRI v1, which kubelet 1.36 still accepts)
// and the C libraries their binaries load.
//
// OpenRC (Debian's openrc with its libraries, and theirs) is for the
// k3os-like node, whose busybox init hands services to OpenRC as k3os
// does; systemd and D-Bus (with theirs) for the systemd node, whose PID 1
// is systemd (the agent reboots it by SIGRTMIN+5 to PID 1; logind and the
// bus run as on a real systemd host). A node runs only its own.
var NodePackages = []string{"containerd", "runc", "containernetworking-plugins", "libseccomp2", "libc6",
	"openrc", "librc1", "libeinfo1", "libaudit1", "libcap-ng0", "libpam0g", "libselinux1", "libpcre2-8-0",
	"systemd", "libsystemd-shared", "libsystemd0", "libblkid1", "libcap2", "libgcrypt20", "libgpg-error0",
	"liblz4-1", "liblzma5", "libmount1", "libssl3", "libzstd1", "libacl1", "libcryptsetup12",
	"libdevmapper1.02.1", "libargon2-1", "libjson-c5", "libuuid1", "libfdisk1", "libkmod2", "libp11-kit0",
	"libffi8", "libapparmor1", "libcrypt1", "libip4tc2", "libudev1",
	"dbus", "dbus-daemon", "dbus-bin", "libdbus-1-3", "libexpat1", "dbus-system-bus-common", "dbus-session-bus-common"}

// NodeModules are the kernel modules the node loads: its virtio NIC, and
// the bridge and veth a pod network uses.
var NodeModules = []string{"failover", "net_failover", "virtio_net", "llc", "stp", "bridge", "veth"}

// Images the node imports: the sandbox image containerd's config names and
// slipway's own.
const (
	PauseImage   = "localhost/slipway/pause:vmnode"
	SlipwayImage = "localhost/slipway/slipway:vmnode"
)

// NodeOptions configure BuildNode.
type NodeOptions struct {
	Out     string // the node disk image to write
	Cache   string // Debian package cache (as Options.Cache)
	Kubelet string // the kubelet binary
	// SlipwayArchive is slipway's container image as `make image-oci`
	// writes it (scripts/image-oci with IMAGE=SlipwayImage): the
	// multi-arch OCI archive the charts' image is, imported as it is.
	SlipwayArchive string
	Pause          string // the static pause binary, packed as PauseImage
	// Forwarder is the static loopfwd binary (images/cmd/loopfwd): the
	// Service addresses pods reach without kube-proxy.
	Forwarder string
	Config    string // a folder copied to the disk's etc/ (containerd, CNI, kubelet configs)
	// KernelPackages are the kernels whose modules are copied, one folder
	// each (nil = the default kernel, as Options.KernelPackage ""): every
	// kernel a release on this node boots.
	KernelPackages []string
}

// BuildNode writes the node disk (ext4, label SLIPWAY_NODE) that turns a
// test VM into a Kubernetes node:
//
//	root/      the unpacked Debian packages (containerd, runc, CNI plugins, libc)
//	bin/       the kubelet and loopfwd
//	modules/<uname -r>/   NodeModules of each kernel, with load.order
//	images/    pause.tar and slipway.tar (o.SlipwayArchive), OCI archives for `ctr images import`
//	etc/       the contents of o.Config
//
// The guest mounts it read-only at /opt/node (images/node/overlay).
func BuildNode(ctx context.Context, o NodeOptions) error {
	work := o.Out + ".d"
	if err := os.RemoveAll(work); err != nil {
		return fmt.Errorf("node disk: %w", err)
	}
	defer os.RemoveAll(work)
	steps := []func() error{
		func() error { return nodeRoot(ctx, o, filepath.Join(work, "root")) },
		func() error { return os.MkdirAll(filepath.Join(work, "bin"), 0o755) },
		func() error { return copyFile(o.Kubelet, filepath.Join(work, "bin", "kubelet"), 0o755) },
		func() error { return copyFile(o.Forwarder, filepath.Join(work, "bin", "loopfwd"), 0o755) },
		func() error { return nodeModules(ctx, o, filepath.Join(work, "modules")) },
		func() error { return nodeImages(o, filepath.Join(work, "images")) },
		func() error { return copyTree(o.Config, filepath.Join(work, "etc")) },
		func() error { return mkfs(ctx, work, o.Out, "SLIPWAY_NODE", 0) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return fmt.Errorf("node disk: %w", err)
		}
	}
	return nil
}

// nodeRoot unpacks NodePackages (cached like the kernel) into dst.
func nodeRoot(ctx context.Context, o NodeOptions, dst string) error {
	// Cached per package list: a list changed unpacks anew.
	root := filepath.Join(o.Cache, "root-node-"+fmt.Sprintf("%x", sha256.Sum256([]byte(strings.Join(NodePackages, " "))))[:12])
	if err := unpackOnce(ctx, o.Cache, root, NodePackages...); err != nil {
		return err
	}
	return copyTree(root, dst)
}

func nodeModules(ctx context.Context, o NodeOptions, dst string) error {
	pkgs := o.KernelPackages
	if len(pkgs) == 0 {
		pkgs = []string{""}
	}
	for _, p := range pkgs {
		d, err := fetchDebian(ctx, o.Cache, p)
		if err != nil {
			return err
		}
		if err := kernelModules(d, filepath.Join(dst, d.kabi)); err != nil {
			return err
		}
	}
	return nil
}

// kernelModules copies d's NodeModules and their load order into dst.
func kernelModules(d *debian, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	order := ""
	for _, m := range NodeModules {
		src := d.modules[m]
		if src == "" {
			return fmt.Errorf("kernel %s has no module %s: it may be built in; adjust NodeModules", d.kabi, m)
		}
		if err := copyFile(src, filepath.Join(dst, m+".ko"), 0o644); err != nil {
			return err
		}
		order += m + ".ko\n"
	}
	return os.WriteFile(filepath.Join(dst, "load.order"), []byte(order), 0o644)
}

func nodeImages(o NodeOptions, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	pause, err := os.ReadFile(o.Pause)
	if err != nil {
		return fmt.Errorf("pause image: %w", err)
	}
	err = oci.WriteFile(filepath.Join(dst, "pause.tar"), oci.Image{Name: PauseImage, Entrypoint: []string{"/pause"},
		Files: []oci.File{{Path: "pause", Mode: 0o755, Data: pause}}})
	if err != nil {
		return err
	}
	slipway, err := os.ReadFile(o.SlipwayArchive)
	if err != nil {
		return fmt.Errorf("slipway's image (make image-oci): %w", err)
	}
	plats, err := oci.Verify(slipway)
	if err != nil {
		return fmt.Errorf("slipway's image %s: %w", o.SlipwayArchive, err)
	}
	if plats["amd64"] == nil {
		return fmt.Errorf("slipway's image %s has no linux/amd64 image, the node's platform", o.SlipwayArchive)
	}
	return os.WriteFile(filepath.Join(dst, "slipway.tar"), slipway, 0o644)
}

// copyTree copies folder src to dst (created), keeping symlinks and modes.
func copyTree(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s: %w: %s", src, err, out)
	}
	return nil
}

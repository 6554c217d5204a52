package build

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"slipway.dev/slipway/images/cpio"
)

// stage0Init is the loader initramfs's /init: it hands PID 1 to `slipway ops
// boot` (busybox stays as the rescue shell).
const stage0Init = `#!/bin/busybox sh
/bin/busybox mkdir -p /sbin /usr/bin /usr/sbin /proc /sys /dev /run /tmp
/bin/busybox --install -s
exec /bin/slipway ops boot
`

// writeInitrd writes an uncompressed newc initramfs to path; fill adds the
// entries beyond the common base (busybox, /dev/console, boot modules).
func writeInitrd(path string, d *debian, fill func(*cpio.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("initrd: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w := cpio.NewWriter(bw)
	err = addBase(w, d)
	if err == nil {
		err = fill(w)
	}
	if err == nil {
		err = w.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write initrd %s: %w", path, err)
	}
	return nil
}

// addBase adds what every initramfs here has: /bin/busybox, /dev/console
// (the kernel opens it before /init runs) and the boot modules.
func addBase(w *cpio.Writer, d *debian) error {
	for _, dir := range []string{"bin", "dev", "lib", "lib/modules", "lib/modules/slipway-boot"} {
		if err := w.Dir(dir, 0o755); err != nil {
			return err
		}
	}
	if err := w.CharDev("dev/console", 0o600, 5, 1); err != nil {
		return err
	}
	if err := addFile(w, "bin/busybox", d.busybox, 0o755); err != nil {
		return err
	}
	for _, m := range BootModules {
		if err := addFile(w, "lib/modules/slipway-boot/"+m+".ko", d.modules[m], 0o644); err != nil {
			return err
		}
	}
	order := strings.Join(modFiles(BootModules), "\n") + "\n"
	return w.File("lib/modules/slipway-boot/load.order", 0o644, []byte(order))
}

func modFiles(mods []string) []string {
	out := make([]string, len(mods))
	for i, m := range mods {
		out[i] = m + ".ko"
	}
	return out
}

func addFile(w *cpio.Writer, name, src string, perm os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return w.File(name, perm, b)
}

// stage0Initrd is the fixed loader initramfs qemu boots.
func stage0Initrd(path string, d *debian, slipway string) error {
	return writeInitrd(path, d, func(w *cpio.Writer) error {
		if err := addFile(w, "bin/slipway", slipway, 0o755); err != nil {
			return err
		}
		return w.File("init", 0o755, []byte(stage0Init))
	})
}

// versionInitrd is kernel/<kversion>/initrd: the overlay (whose /init mounts
// the system directory and starts the chosen rootfs) and a file naming the
// kernel version it belongs to.
func versionInitrd(path string, d *debian, overlay, extra, kversion string) error {
	return writeInitrd(path, d, func(w *cpio.Writer) error {
		if err := addTree(w, overlay); err != nil {
			return err
		}
		// The kernel unpacks entries in order: a later file replaces an earlier one.
		for _, e := range filepath.SplitList(extra) {
			if err := w.Tree(e); err != nil {
				return fmt.Errorf("extra overlay %s: %w", e, err)
			}
		}
		for _, dir := range []string{"etc/slipway"} {
			if err := w.Dir(dir, 0o755); err != nil {
				return err
			}
		}
		return w.File("etc/slipway/kernel-version", 0o644, []byte(kversion+"\n"))
	})
}

// addTree adds the overlay tree (a folder repeated from the base is
// harmless: the kernel keeps the existing one).
func addTree(w *cpio.Writer, root string) error {
	if _, err := os.Stat(filepath.Join(root, "init")); err != nil {
		return fmt.Errorf("overlay %s has no init: %w", root, err)
	}
	return w.Tree(root)
}

package build

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"slipway.dev/slipway/images/oci"
)

// elfOf is an ELF header of machine m and nothing else: enough for oci.Verify.
func elfOf(m elf.Machine) []byte {
	h := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(m), Version: uint32(elf.EV_CURRENT), Ehsize: 64}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var buf bytes.Buffer
	_ = binary.Write(&buf, binary.LittleEndian, h)
	return buf.Bytes()
}

// TestNodeImportsTheImageOCIArchive: the node disk carries slipway's image
// as `make image-oci` writes it (a multi-arch index), byte for byte, and
// refuses anything else: the single-image archive the node once packed
// itself, an index without the node's platform.
func TestNodeImportsTheImageOCIArchive(t *testing.T) {
	dir := t.TempDir()
	pause := filepath.Join(dir, "pause")
	if err := os.WriteFile(pause, elfOf(elf.EM_X86_64), 0o755); err != nil {
		t.Fatal(err)
	}
	image := func(arch string, m elf.Machine) oci.Image {
		return oci.Image{Name: SlipwayImage, Arch: arch, Entrypoint: []string{"/usr/bin/slipway"},
			Files: []oci.File{{Path: "usr/bin/slipway", Mode: 0o755, Data: elfOf(m)}, {Path: "usr/bin/kubectl-eds", Link: "slipway"}}}
	}
	index := func(imgs ...oci.Image) []byte {
		var buf bytes.Buffer
		if err := oci.WriteIndex(&buf, SlipwayImage, imgs); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	var single bytes.Buffer
	if err := oci.Write(&single, image("amd64", elf.EM_X86_64)); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		archive []byte
		err     string
	}{
		"make image-oci's archive":     {archive: index(image("amd64", elf.EM_X86_64), image("arm64", elf.EM_AARCH64))},
		"a single-image archive":       {archive: single.Bytes(), err: "image index"},
		"no image for the node's arch": {archive: index(image("arm64", elf.EM_AARCH64)), err: "no linux/amd64"},
	} {
		archive := filepath.Join(dir, "slipway-oci.tar")
		if err := os.WriteFile(archive, tc.archive, 0o644); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		err := nodeImages(NodeOptions{Pause: pause, SlipwayArchive: archive}, dst)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want one saying %q", name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := os.ReadFile(filepath.Join(dst, "slipway.tar"))
		if err != nil || !bytes.Equal(got, tc.archive) {
			t.Errorf("%s: the node's slipway.tar is not the archive as written (%v)", name, err)
		}
	}
}

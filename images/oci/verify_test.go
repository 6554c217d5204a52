package oci

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"strings"
	"testing"
)

// tinyELF is an ELF header of machine m and nothing else: enough for
// debug/elf to tell the architecture.
func tinyELF(t *testing.T, m elf.Machine) []byte {
	t.Helper()
	h := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(m), Version: uint32(elf.EV_CURRENT), Ehsize: 64}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func image(arch string, bin []byte) Image {
	return Image{Name: "localhost/slipway:v1", Arch: arch, Entrypoint: []string{"/usr/bin/slipway"},
		Files: []File{{Path: "usr/bin/slipway", Mode: 0o755, Data: bin}, {Path: "usr/bin/kubectl-eds", Link: "slipway"},
			{Path: "etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Data: []byte("roots")}}}
}

func TestWriteIndexVerifies(t *testing.T) {
	var buf bytes.Buffer
	imgs := []Image{image("amd64", tinyELF(t, elf.EM_X86_64)), image("arm64", tinyELF(t, elf.EM_AARCH64))}
	if err := WriteIndex(&buf, "localhost/slipway:v1", imgs); err != nil {
		t.Fatal(err)
	}
	plats, err := Verify(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		f := plats[arch]
		if f["usr/bin/kubectl-eds"] != "-> slipway" || f["usr/bin/slipway"] == "" || f["etc/ssl/certs/ca-certificates.crt"] == "" {
			t.Errorf("%s image files: %v", arch, f)
		}
	}
	var again bytes.Buffer
	if err := WriteIndex(&again, "localhost/slipway:v1", imgs); err != nil || !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Errorf("two writes of the same images differ (err %v)", err)
	}
}

func TestVerifyRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		imgs   []Image
		mangle func([]byte) []byte
		want   string
	}{
		"an amd64 binary in the arm64 image": {imgs: []Image{image("arm64", tinyELF(t, elf.EM_X86_64))}, want: "ELF machine"},
		"a binary that is no ELF":            {imgs: []Image{image("amd64", []byte("#!/bin/sh"))}, want: "not an ELF"},
		"a changed blob": {imgs: []Image{image("amd64", tinyELF(t, elf.EM_X86_64))}, want: "digest",
			mangle: func(b []byte) []byte { return bytes.Replace(b, []byte(`"os":"linux"`), []byte(`"os":"LINUX"`), 1) }},
	} {
		var buf bytes.Buffer
		if err := WriteIndex(&buf, "localhost/slipway:v1", tc.imgs); err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()
		if tc.mangle != nil {
			b = tc.mangle(b)
		}
		if _, err := Verify(b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Verify says %v, want an error about %q", name, err, tc.want)
		}
	}
}

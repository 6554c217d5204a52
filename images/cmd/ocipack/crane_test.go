package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// crane is go-containerregistry's CLI: on PATH, else in the tools folder
// (scripts/install-tools builds it); absent, the test skips.
func crane(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("crane"); err == nil {
		return p
	}
	if dir := os.Getenv("SLIPWAY_TOOLS_DIR"); dir != "" {
		if p := filepath.Join(dir, "crane"); fileExists(p) {
			return p
		}
	}
	t.Skip("no crane on PATH or in $SLIPWAY_TOOLS_DIR")
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// elfHeader is an ELF header of machine m: enough for oci.Verify.
func elfHeader(m elf.Machine) []byte {
	h := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(m), Version: uint32(elf.EV_CURRENT), Ehsize: 64}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var buf bytes.Buffer
	binary.Write(&buf, binary.LittleEndian, h)
	return buf.Bytes()
}

// TestCraneAcceptsTheArchive pushes the layout ocipack writes to crane's own
// registry (`crane registry serve`), then `crane validate`s it and reads the
// arm64 image's files back through the index.
func TestCraneAcceptsTheArchive(t *testing.T) {
	bin := crane(t)
	dir := t.TempDir()
	archive := filepath.Join(dir, "slipway-oci.tar")
	ca := filepath.Join(dir, "ca.crt")
	os.WriteFile(ca, []byte("roots"), 0o644)
	amd, arm := filepath.Join(dir, "amd64"), filepath.Join(dir, "arm64")
	os.WriteFile(amd, elfHeader(elf.EM_X86_64), 0o755)
	os.WriteFile(arm, elfHeader(elf.EM_AARCH64), 0o755)
	if err := run("localhost/slipway:test", archive, ca, "../../../LICENSE", []string{"amd64=" + amd, "arm64=" + arm}); err != nil {
		t.Fatal(err)
	}
	layout := filepath.Join(dir, "layout")
	os.Mkdir(layout, 0o755)
	if out, err := exec.Command("tar", "-xf", archive, "-C", layout).CombinedOutput(); err != nil {
		t.Fatalf("untar: %v\n%s", err, out)
	}
	srv := exec.Command(bin, "registry", "serve", "--address", "127.0.0.1:0")
	stderr, _ := srv.StderrPipe()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, p, ok := strings.Cut(sc.Text(), "serving on port "); ok {
				port <- p
			}
		}
	}()
	var ref string
	select {
	case p := <-port:
		ref = "127.0.0.1:" + p + "/slipway:test"
	case <-time.After(time.Minute):
		t.Fatal("crane registry serve printed no port")
	}
	for _, args := range [][]string{{"push", layout, ref}, {"validate", "--remote", ref}} {
		if out, err := exec.Command(bin, append(args, "--insecure")...).CombinedOutput(); err != nil {
			t.Fatalf("crane %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	out, err := exec.Command(bin, "export", "--insecure", "--platform", "linux/arm64", ref, "-").Output()
	if err != nil {
		t.Fatalf("crane export: %v", err)
	}
	cmd := exec.Command("tar", "-tvf", "-")
	cmd.Stdin = bytes.NewReader(out)
	list, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(list), "usr/bin/kubectl-eds -> slipway") || !strings.Contains(string(list), "etc/ssl/certs/ca-certificates.crt") ||
		!strings.Contains(string(list), LicensePath) {
		t.Errorf("the arm64 image crane exports: %v\n%s", err, list)
	}
}

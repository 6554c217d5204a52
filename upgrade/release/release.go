// Package release describes the artifacts of a k3os-format release: their
// names for an architecture, and the sha256sum-<arch>.txt file that lists
// their digests.
package release

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"runtime"
	"strings"
)

// Artifact names of one release for arch, as k3os published them.
func RootfsArtifact(arch string) string        { return "k3os-rootfs-" + arch + ".tar.gz" }
func KernelArtifact(arch string) string        { return "k3os-kernel-" + arch + ".squashfs" }
func InitrdArtifact(arch string) string        { return "k3os-initrd-" + arch }
func KernelVersionArtifact(arch string) string { return "k3os-kernel-version-" + arch }
func SumsArtifact(arch string) string          { return "sha256sum-" + arch + ".txt" }

// File names inside the system directory's kernel/<version>/ folder.
const (
	KernelFile = "kernel.squashfs"
	InitrdFile = "initrd"
)

// RootfsStrip is how many leading path elements of a rootfs tarball entry
// precede the system directory's own paths (`<version>/k3os/system/`).
const RootfsStrip = 3

// Arch names this machine's architecture the way k3os artifacts do (k3os
// uses Go's names: amd64, arm64, arm).
func Arch() string { return runtime.GOARCH }

// Sums maps an artifact name to its lowercase hex sha256 digest.
type Sums map[string]string

// MaxSumsSize bounds the size of a checksum file read into memory.
const MaxSumsSize = 1 << 20

// ParseSums reads a sha256sum(1) file: one `<64 hex>  <name>` (or
// `<hex> *<name>` for binary mode) per line. Blank lines and # comments are
// skipped; names may carry a leading "./". A malformed line, a duplicate name
// with another digest or a file over MaxSumsSize is an error.
func ParseSums(r io.Reader) (Sums, error) {
	sums := Sums{}
	sc := bufio.NewScanner(io.LimitReader(r, MaxSumsSize+1))
	sc.Buffer(make([]byte, 0, 4096), MaxSumsSize+1)
	total, n := 0, 0
	for sc.Scan() {
		n++
		total += len(sc.Bytes()) + 1
		if total > MaxSumsSize+1 {
			return nil, fmt.Errorf("checksum file is larger than %d bytes: is it really a sha256sum file?", MaxSumsSize)
		}
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		name, sum, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("checksum file line %d: %w", n, err)
		}
		if old, ok := sums[name]; ok && old != sum {
			return nil, fmt.Errorf("checksum file line %d: %q listed twice with different digests", n, name)
		}
		sums[name] = sum
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read checksum file: %w", err)
	}
	return sums, nil
}

func parseLine(line string) (name, sum string, err error) {
	hexSum, rest, ok := strings.Cut(line, " ")
	if !ok || len(hexSum) != 64 {
		return "", "", fmt.Errorf("want `<sha256 hex>  <file name>`, got %q", line)
	}
	if _, err := hex.DecodeString(hexSum); err != nil {
		return "", "", fmt.Errorf("digest is not hex: %q", hexSum)
	}
	switch {
	case strings.HasPrefix(rest, " "), strings.HasPrefix(rest, "*"):
		rest = rest[1:]
	}
	name = strings.TrimPrefix(rest, "./")
	if name == "" || strings.ContainsAny(name, "\x00") {
		return "", "", fmt.Errorf("missing file name in %q", line)
	}
	return name, strings.ToLower(hexSum), nil
}

// Format writes sums in sha256sum(1) text format, in the order of names.
func Format(w io.Writer, sums Sums, names []string) error {
	for _, n := range names {
		if _, err := fmt.Fprintf(w, "%s  %s\n", sums[n], n); err != nil {
			return err
		}
	}
	return nil
}

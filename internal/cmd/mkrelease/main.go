// Command mkrelease writes a k3os-format release into a mirror directory,
// for the demo, the benchmarks and tests outside Go:
//
//	go run ./internal/cmd/mkrelease -mirror build/mirror -version v2 [-rootfs-size 256Mi]
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"slipway.dev/slipway/upgrade/releasetest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "mkrelease: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var o releasetest.Options
	var rootfsSize string
	fs := flag.NewFlagSet("mkrelease", flag.ContinueOnError)
	fs.StringVar(&o.Mirror, "mirror", "", "mirror directory (required)")
	fs.StringVar(&o.Version, "version", "", "release version, e.g. v1.2.3 (required)")
	fs.StringVar(&o.Arch, "arch", "", "artifact architecture (default: this machine's)")
	fs.StringVar(&o.K3sVersion, "k3s-version", "", "k3s version inside the rootfs (default <version>-k3s1)")
	fs.StringVar(&o.KernelVersion, "kernel-version", "", "kernel version (default 5.15.0-<version>)")
	fs.StringVar(&rootfsSize, "rootfs-size", "64Ki", "uncompressed size of the generated rootfs payload (Ki, Mi, Gi suffixes)")
	fs.IntVar(&o.RootfsFiles, "rootfs-files", 16, "number of generated rootfs files")
	fs.StringVar(&o.K3osBinary, "k3os-binary", "", "file to ship as k3os/<version>/k3os instead of generated content")
	fs.StringVar(&o.K3sBinary, "k3s-binary", "", "file to ship as k3s/<k3s-version>/k3s")
	fs.StringVar(&o.Kernel, "kernel", "", "file to ship as the kernel squashfs")
	fs.StringVar(&o.Initrd, "initrd", "", "file to ship as the initrd")
	fs.BoolVar(&o.NoLatest, "no-latest", false, "do not point <mirror>/latest at this version")
	if err := fs.Parse(args); err != nil {
		return err
	}
	size, err := parseSize(rootfsSize)
	if err != nil {
		return err
	}
	o.RootfsBytes = size
	rel, err := releasetest.Write(o)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s (k3s %s, kernel %s)\n", rel.Dir, rel.K3sVersion, rel.KernelVersion)
	return nil
}

// parseSize reads 256Mi, 64Ki, 1Gi or plain bytes.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	for suf, m := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if strings.HasSuffix(s, suf) {
			s, mult = strings.TrimSuffix(s, suf), m
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional Ki, Mi or Gi suffix", s)
	}
	return n * mult, nil
}

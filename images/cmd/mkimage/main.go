// Command mkimage builds the bootable test OS images and release mirror
// (package images/build) without Docker or root. scripts/image runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"

	"slipway.dev/slipway/images/build"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	cache, _ := os.UserCacheDir()
	var o build.Options
	var versions, broken string
	flag.StringVar(&o.Out, "out", "build/images", "output folder")
	flag.StringVar(&o.Cache, "cache", filepath.Join(cache, "slipway", "images"), "Debian package cache")
	flag.StringVar(&o.Slipway, "slipway", "bin/slipway", "static slipway binary to install")
	flag.StringVar(&o.Overlay, "overlay", "overlay", "overlay folder")
	flag.StringVar(&versions, "versions", "v1,v2,v3", "releases to build, comma separated")
	flag.StringVar(&broken, "broken", "v3", "releases built broken (their init exits), comma separated")
	flag.StringVar(&o.Install, "install", "v1", "release installed on system.img")
	flag.StringVar(&o.KernelPackage, "kernel-package", "", "Debian kernel package (default: what linux-image-cloud-amd64 names)")
	flag.IntVar(&o.DiskMiB, "disk-mib", 1024, "system disk size in MiB (sparse)")
	flag.Parse()
	isBroken := map[string]bool{}
	for _, b := range strings.Split(broken, ",") {
		isBroken[strings.TrimSpace(b)] = true
	}
	for _, v := range strings.Split(versions, ",") {
		v = strings.TrimSpace(v)
		o.Versions = append(o.Versions, build.Version{Name: v, Broken: isBroken[v]})
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := build.Run(ctx, o)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(r.Steps))
	for n := range r.Steps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Printf("step %-12s %s\n", n, r.Steps[n].Round(1e6))
	}
	fmt.Printf("stage0 %s %s\nsystem %s\nmirror %s (%s)\n", r.Kernel, r.Initrd, r.SystemImage, r.Mirror, r.MirrorImage)
	return nil
}

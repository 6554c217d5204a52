// Command ocipack writes slipway's container image as a multi-arch OCI
// image-layout archive, without a container engine: per architecture, the
// static binary at /usr/bin/slipway, its multi-call names as symlinks, and
// the CA roots and the license at /usr/share/doc/slipway/LICENSE; the same
// image as the Dockerfile. scripts/image-oci cross-
// builds the binaries and runs it; it verifies what it wrote (oci.Verify).
//
//	ocipack -name docker.io/slipway/slipway:v1.2.3 -out build/slipway-oci.tar \
//	    -ca /etc/ssl/certs/ca-certificates.crt amd64=build/oci/amd64/slipway arm64=build/oci/arm64/slipway
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"slipway.dev/slipway/images/oci"
)

// Links are the multi-call names the image carries beside slipway (the
// Dockerfile's): the kubectl plugin and the old update operator's names.
var Links = []string{"kubectl-eds", "dogswatch", "bottlerocket-update-operator"}

// imageLabels are the -label flags: the image config's labels.
var imageLabels map[string]string

// labelFlags collects repeated -label KEY=VALUE flags.
type labelFlags map[string]string

func (l *labelFlags) String() string { return fmt.Sprint(map[string]string(*l)) }

func (l *labelFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("label %q: want KEY=VALUE", s)
	}
	if *l == nil {
		*l = labelFlags{}
	}
	(*l)[k] = v
	return nil
}

// LicensePath is where the image carries slipway's license (Apache-2.0),
// where Debian-style images keep a package's: /usr/share/doc/<package>/.
const LicensePath = "usr/share/doc/slipway/LICENSE"

// User is the image's default user, uid:gid 65532 ("nonroot" of the
// distroless images): a pod with runAsNonRoot and no runAsUser starts, and
// the kubelet refuses nothing. The node agents and upgrade Jobs, which need
// root, set runAsUser: 0 in their own securityContext.
const User = "65532:65532"

func main() {
	name := flag.String("name", "", "image reference, with a tag")
	out := flag.String("out", "", "archive to write")
	ca := flag.String("ca", "/etc/ssl/certs/ca-certificates.crt", "CA roots bundle to include")
	license := flag.String("license", "LICENSE", "slipway's license, shipped at /"+LicensePath)
	var labels labelFlags
	flag.Var(&labels, "label", "KEY=VALUE label of the image config (repeat), e.g. org.opencontainers.image.version=v1.2.3")
	flag.Parse()
	imageLabels = labels
	if err := run(*name, *out, *ca, *license, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "ocipack:", err)
		os.Exit(1)
	}
}

func run(name, out, ca, license string, bins []string) error {
	if name == "" || out == "" || len(bins) == 0 {
		return fmt.Errorf("usage: ocipack -name REF -out FILE [-ca FILE] [-license FILE] ARCH=BINARY, one per architecture")
	}
	roots, err := os.ReadFile(ca)
	if err != nil {
		return fmt.Errorf("read the CA roots (install ca-certificates or pass -ca): %w", err)
	}
	lic, err := os.ReadFile(license)
	if err != nil {
		return fmt.Errorf("read the license (run from the repository's root or pass -license): %w", err)
	}
	if len(bytes.TrimSpace(lic)) == 0 {
		return fmt.Errorf("the license %s is empty", license)
	}
	var imgs []oci.Image
	for _, b := range bins {
		arch, path, ok := strings.Cut(b, "=")
		if !ok {
			return fmt.Errorf("%q: want ARCH=BINARY", b)
		}
		bin, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		img := Image(name, arch, bin, roots, lic)
		img.Labels = imageLabels
		imgs = append(imgs, img)
	}
	var buf bytes.Buffer
	if err := oci.WriteIndex(&buf, name, imgs); err != nil {
		return err
	}
	plats, err := oci.Verify(buf.Bytes())
	if err != nil {
		return fmt.Errorf("the archive written does not verify: %w", err)
	}
	for arch, files := range plats {
		if _, ok := files[LicensePath]; !ok {
			return fmt.Errorf("the %s image holds no /%s", arch, LicensePath)
		}
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	var archs []string
	for a := range plats {
		archs = append(archs, a)
	}
	sort.Strings(archs)
	fmt.Fprintf(os.Stderr, "ocipack: wrote %s (%s, %d bytes) for %s\n", out, name, buf.Len(), strings.Join(archs, ", "))
	return nil
}

// Image is slipway's image for one architecture.
func Image(name, arch string, bin, roots, license []byte) oci.Image {
	files := []oci.File{
		{Path: "usr/bin/slipway", Mode: 0o755, Data: bin},
		{Path: "etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Data: roots},
		{Path: LicensePath, Mode: 0o644, Data: license},
	}
	for _, l := range Links {
		files = append(files, oci.File{Path: "usr/bin/" + l, Link: "slipway"})
	}
	return oci.Image{Name: name, Arch: arch, Files: files, Entrypoint: []string{"/usr/bin/slipway"}, User: User,
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}}
}

// Package oci writes container images as OCI image-layout tar archives
// without a container engine: one uncompressed tar layer built from files
// given by the caller, an image config, a manifest and an index naming the
// image (Write), or one image per platform behind an image index (WriteIndex,
// what `make image-oci` writes). `ctr -n k8s.io images import` loads such an
// archive on a node that reaches no registry.
package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// Media types of the OCI image specification.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
	// MediaTypeLayerGzip is a gzip-compressed layer (WriteIndex's: what
	// registries and crane expect).
	MediaTypeLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip"
	// AnnotationRefName is the tag part of the reference (OCI).
	AnnotationRefName = "org.opencontainers.image.ref.name"
	// AnnotationImageName is the full reference containerd imports under.
	AnnotationImageName = "io.containerd.image.name"
)

// File is one entry of the image's single layer.
type File struct {
	Path string // inside the image, without a leading slash
	Mode int64  // permission bits
	Data []byte // content; nil with Link set for a symlink
	Link string // symlink target
}

// Image is what to write.
type Image struct {
	Name       string // full reference, e.g. localhost/slipway:v1
	Arch       string // GOARCH of the files (default amd64); OS is linux
	Files      []File
	Entrypoint []string
	Cmd        []string
	Env        []string
	// User the image runs as unless a pod says otherwise ("uid:gid";
	// empty: root).
	User string
	// Labels of the image config (org.opencontainers.image.*, ...).
	Labels map[string]string
}

// Descriptor points at a blob.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform of a manifest in the index.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Manifest of one image.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Index is index.json.
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Config is the image configuration.
type Config struct {
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Created      time.Time `json:"created"`
	Config       struct {
		User       string            `json:"User,omitempty"`
		Labels     map[string]string `json:"Labels,omitempty"`
		Entrypoint []string          `json:"Entrypoint,omitempty"`
		Cmd        []string          `json:"Cmd,omitempty"`
		Env        []string          `json:"Env,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// WriteFile writes img as an OCI image-layout archive at path.
func WriteFile(path string, img Image) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("oci archive: %w", err)
	}
	if err := Write(f, img); err != nil {
		f.Close()
		return fmt.Errorf("oci archive %s: %w", path, err)
	}
	return f.Close()
}

// Write writes img as an OCI image-layout archive to w. The output depends
// only on img: entries carry a fixed time, so equal inputs give equal digests.
func Write(w io.Writer, img Image) error {
	if img.Name == "" || !strings.Contains(img.Name, ":") {
		return fmt.Errorf("image name %q needs a tag (e.g. localhost/slipway:v1)", img.Name)
	}
	blobs, md, err := manifestOf(img, false)
	if err != nil {
		return err
	}
	md.Annotations = names(img.Name)
	index, err := json.Marshal(Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{md}})
	if err != nil {
		return err
	}
	return writeLayout(w, index, blobs)
}

// WriteIndex writes one image per platform as an OCI image-layout archive
// with gzip-compressed layers:
// index.json names an image index (annotated with name, the reference to
// import it as) whose manifests carry their platform, as `docker buildx
// --output type=oci` writes a multi-arch image. Equal inputs give equal digests.
func WriteIndex(w io.Writer, name string, imgs []Image) error {
	if name == "" || !strings.Contains(name, ":") {
		return fmt.Errorf("image name %q needs a tag (e.g. localhost/slipway:v1)", name)
	}
	if len(imgs) == 0 {
		return fmt.Errorf("image %s: no platform to write", name)
	}
	var blobs [][]byte
	var mds []Descriptor
	for _, img := range imgs {
		b, md, err := manifestOf(img, true)
		if err != nil {
			return fmt.Errorf("image %s for %s: %w", name, img.Arch, err)
		}
		blobs, mds = append(blobs, b...), append(mds, md)
	}
	inner, err := json.Marshal(Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: mds})
	if err != nil {
		return err
	}
	top := describe(MediaTypeIndex, inner)
	top.Annotations = names(name)
	index, err := json.Marshal(Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{top}})
	if err != nil {
		return err
	}
	return writeLayout(w, index, append(blobs, inner))
}

// names are the annotations that name an image in index.json.
func names(name string) map[string]string {
	return map[string]string{AnnotationImageName: name, AnnotationRefName: name[strings.LastIndex(name, ":")+1:]}
}

// writeLayout writes the archive: oci-layout, index.json and the blobs.
func writeLayout(w io.Writer, index []byte, blobs [][]byte) error {
	tw := tar.NewWriter(w)
	if err := put(tw, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := put(tw, "index.json", index); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, b := range blobs {
		if seen[digest(b)] {
			continue
		}
		seen[digest(b)] = true
		if err := put(tw, "blobs/sha256/"+strings.TrimPrefix(digest(b), "sha256:"), b); err != nil {
			return err
		}
	}
	return tw.Close()
}

// manifestOf returns the blobs (layer, config, manifest) of img and the
// manifest's descriptor with its platform.
func manifestOf(img Image, compress bool) ([][]byte, Descriptor, error) {
	layer, err := Layer(img.Files)
	if err != nil {
		return nil, Descriptor{}, err
	}
	blob, mediaType := layer, MediaTypeLayer
	if compress {
		if blob, err = gzipped(layer); err != nil {
			return nil, Descriptor{}, err
		}
		mediaType = MediaTypeLayerGzip
	}
	arch := img.Arch
	if arch == "" {
		arch = "amd64"
	}
	var cfg Config
	cfg.Architecture, cfg.OS = arch, "linux"
	cfg.Created = time.Unix(0, 0).UTC()
	cfg.Config.Entrypoint, cfg.Config.Cmd, cfg.Config.Env, cfg.Config.User = img.Entrypoint, img.Cmd, img.Env, img.User
	cfg.Config.Labels = img.Labels
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{digest(layer)}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, Descriptor{}, err
	}
	m := Manifest{SchemaVersion: 2, MediaType: MediaTypeManifest,
		Config: describe(MediaTypeConfig, cfgJSON),
		Layers: []Descriptor{describe(mediaType, blob)}}
	mJSON, err := json.Marshal(m)
	if err != nil {
		return nil, Descriptor{}, err
	}
	md := describe(MediaTypeManifest, mJSON)
	md.Platform = &Platform{Architecture: arch, OS: "linux"}
	return [][]byte{blob, cfgJSON, mJSON}, md, nil
}

// gzipped compresses b with no name and no time in the header, so equal
// layers give equal blobs.
func gzipped(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Layer returns an uncompressed tar of files, with their parent folders,
// sorted by path, owned by root.
func Layer(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, f := range sorted {
		p := strings.TrimPrefix(path.Clean("/"+f.Path), "/")
		if p == "" {
			return nil, fmt.Errorf("layer file with an empty path")
		}
		for _, d := range parents(p) {
			if !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
					return nil, err
				}
			}
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: f.Mode, Size: int64(len(f.Data)), ModTime: time.Unix(0, 0)}
		if f.Link != "" {
			h = &tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: f.Link, Mode: 0o777, ModTime: time.Unix(0, 0)}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer %s: %w", p, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("layer %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parents lists p's parent folders, outermost first.
func parents(p string) []string {
	var out []string
	for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
		out = append([]string{d}, out...)
	}
	return out
}

func put(tw *tar.Writer, name string, b []byte) error {
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0)}
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	if _, err := tw.Write(b); err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	return nil
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func describe(mediaType string, b []byte) Descriptor {
	return Descriptor{MediaType: mediaType, Digest: digest(b), Size: int64(len(b))}
}

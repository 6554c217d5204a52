// Package oci writes container images as OCI image-layout tar archives
// without a container engine: one uncompressed tar layer built from files
// given by the caller, an image config, a manifest and an index naming the
// image. `ctr -n k8s.io images import` loads such an archive on a node that
// reaches no registry.
package oci

import (
	"archive/tar"
	"bytes"
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
	Files      []File
	Entrypoint []string
	Cmd        []string
	Env        []string
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
		Entrypoint []string `json:"Entrypoint,omitempty"`
		Cmd        []string `json:"Cmd,omitempty"`
		Env        []string `json:"Env,omitempty"`
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
	layer, err := Layer(img.Files)
	if err != nil {
		return err
	}
	blobs, index, err := layout(img, layer)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if err := put(tw, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := put(tw, "index.json", index); err != nil {
		return err
	}
	for _, b := range blobs {
		if err := put(tw, "blobs/sha256/"+strings.TrimPrefix(digest(b), "sha256:"), b); err != nil {
			return err
		}
	}
	return tw.Close()
}

// layout returns the blobs (layer, config, manifest) and index.json of img.
func layout(img Image, layer []byte) ([][]byte, []byte, error) {
	var cfg Config
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Created = time.Unix(0, 0).UTC()
	cfg.Config.Entrypoint, cfg.Config.Cmd, cfg.Config.Env = img.Entrypoint, img.Cmd, img.Env
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{digest(layer)}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, nil, err
	}
	m := Manifest{SchemaVersion: 2, MediaType: MediaTypeManifest,
		Config: describe(MediaTypeConfig, cfgJSON),
		Layers: []Descriptor{describe(MediaTypeLayer, layer)}}
	mJSON, err := json.Marshal(m)
	if err != nil {
		return nil, nil, err
	}
	md := describe(MediaTypeManifest, mJSON)
	md.Platform = &Platform{Architecture: "amd64", OS: "linux"}
	md.Annotations = map[string]string{AnnotationImageName: img.Name, AnnotationRefName: img.Name[strings.LastIndex(img.Name, ":")+1:]}
	idx, err := json.Marshal(Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{md}})
	if err != nil {
		return nil, nil, err
	}
	return [][]byte{layer, cfgJSON, mJSON}, idx, nil
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

package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Platforms is what Verify found: per architecture, the image's files by
// path (symlinks as "-> target").
type Platforms map[string]map[string]string

// elfMachine is the ELF machine of each GOARCH an image may hold.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// Verify checks an OCI image-layout archive written by WriteIndex: the
// oci-layout marker, index.json naming one image index, every blob present
// under its digest with the size its descriptor says, one manifest per
// platform whose config names the same platform, and each layer a tar whose
// regular files at entrypoint paths are ELF binaries of that architecture.
func Verify(archive []byte) (Platforms, error) {
	entries, err := readEntries(archive)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(entries["oci-layout"], []byte(`{"imageLayoutVersion":"1.0.0"}`)) {
		return nil, errors.New("no oci-layout marker of version 1.0.0")
	}
	var top Index
	if err := json.Unmarshal(entries["index.json"], &top); err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	if top.SchemaVersion != 2 || len(top.Manifests) != 1 || top.Manifests[0].MediaType != MediaTypeIndex {
		return nil, fmt.Errorf("index.json should name one image index, names %+v", top.Manifests)
	}
	if top.Manifests[0].Annotations[AnnotationRefName] == "" {
		return nil, errors.New("index.json: the image index has no " + AnnotationRefName)
	}
	var inner Index
	if err := blobJSON(entries, top.Manifests[0], &inner); err != nil {
		return nil, err
	}
	out := Platforms{}
	for _, md := range inner.Manifests {
		if md.MediaType != MediaTypeManifest || md.Platform == nil || md.Platform.OS != "linux" {
			return nil, fmt.Errorf("image index entry %s: not a linux image manifest with a platform", md.Digest)
		}
		files, err := verifyManifest(entries, md)
		if err != nil {
			return nil, fmt.Errorf("%s manifest: %w", md.Platform.Architecture, err)
		}
		out[md.Platform.Architecture] = files
	}
	return out, nil
}

func verifyManifest(entries map[string][]byte, md Descriptor) (map[string]string, error) {
	var m Manifest
	var cfg Config
	if err := blobJSON(entries, md, &m); err != nil {
		return nil, err
	}
	if err := blobJSON(entries, m.Config, &cfg); err != nil {
		return nil, err
	}
	arch := md.Platform.Architecture
	if cfg.Architecture != arch || cfg.OS != "linux" || len(m.Layers) != len(cfg.RootFS.DiffIDs) {
		return nil, fmt.Errorf("config says %s/%s with %d diff IDs for %d layers", cfg.OS, cfg.Architecture, len(cfg.RootFS.DiffIDs), len(m.Layers))
	}
	files := map[string]string{}
	for i, l := range m.Layers {
		b, err := blobOf(entries, l)
		if err != nil {
			return nil, err
		}
		if l.MediaType == MediaTypeLayerGzip {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				return nil, fmt.Errorf("layer %d: %w", i, err)
			}
			if b, err = io.ReadAll(zr); err != nil {
				return nil, fmt.Errorf("layer %d: %w", i, err)
			}
		}
		if digest(b) != cfg.RootFS.DiffIDs[i] {
			return nil, fmt.Errorf("layer %d: diff ID %s, content %s", i, cfg.RootFS.DiffIDs[i], digest(b))
		}
		tr := tar.NewReader(bytes.NewReader(b))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("layer %d: %w", i, err)
			}
			switch h.Typeflag {
			case tar.TypeSymlink:
				files[h.Name] = "-> " + h.Linkname
			case tar.TypeReg:
				data, err := io.ReadAll(tr)
				if err != nil {
					return nil, err
				}
				files[h.Name] = fmt.Sprintf("%d bytes", len(data))
				if isEntrypoint(h.Name, cfg.Config.Entrypoint) {
					if err := checkELF(data, arch); err != nil {
						return nil, fmt.Errorf("%s: %w", h.Name, err)
					}
				}
			}
		}
	}
	return files, nil
}

func isEntrypoint(name string, ep []string) bool {
	return len(ep) > 0 && "/"+name == ep[0]
}

func checkELF(data []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not an ELF binary: %w", err)
	}
	if want, ok := elfMachine[arch]; !ok || f.Machine != want {
		return fmt.Errorf("ELF machine %v in the %s image", f.Machine, arch)
	}
	return nil
}

func readEntries(archive []byte) (map[string][]byte, error) {
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the archive: %w", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		out[h.Name] = data
	}
}

func blobOf(entries map[string][]byte, d Descriptor) ([]byte, error) {
	b, ok := entries["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	switch {
	case !ok:
		return nil, fmt.Errorf("blob %s missing", d.Digest)
	case int64(len(b)) != d.Size || digest(b) != d.Digest:
		return nil, fmt.Errorf("blob %s: %d bytes of digest %s, descriptor says %d", d.Digest, len(b), digest(b), d.Size)
	}
	return b, nil
}

func blobJSON(entries map[string][]byte, d Descriptor, into any) error {
	b, err := blobOf(entries, d)
	if err == nil {
		err = json.Unmarshal(b, into)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", d.MediaType, d.Digest, err)
	}
	return nil
}

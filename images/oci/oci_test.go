package oci

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// readArchive returns the archive's entries by name, failing on a blob
// whose name is not the digest of its content.
func readArchive(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if name, ok := strings.CutPrefix(h.Name, "blobs/sha256/"); ok && "sha256:"+name != digest(data) {
			t.Errorf("blob %s holds content of digest %s", h.Name, digest(data))
		}
		out[h.Name] = data
	}
	return out
}

func blob(t *testing.T, entries map[string][]byte, d Descriptor, into any) []byte {
	t.Helper()
	b, ok := entries["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	if !ok || int64(len(b)) != d.Size {
		t.Fatalf("blob %s (size %d) missing or of size %d", d.Digest, d.Size, len(b))
	}
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("blob %s: %v", d.Digest, err)
		}
	}
	return b
}

func TestWriteLayout(t *testing.T) {
	img := Image{Name: "localhost/slipway:v1", Entrypoint: []string{"/usr/bin/slipway"},
		Files: []File{{Path: "usr/bin/slipway", Mode: 0o755, Data: []byte("binary")},
			{Path: "usr/bin/kubectl-eds", Link: "slipway"}}}
	var buf bytes.Buffer
	if err := Write(&buf, img); err != nil {
		t.Fatal(err)
	}
	e := readArchive(t, buf.Bytes())
	if string(e["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", e["oci-layout"])
	}
	var idx Index
	if err := json.Unmarshal(e["index.json"], &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json %s: %v", e["index.json"], err)
	}
	md := idx.Manifests[0]
	if md.Annotations[AnnotationImageName] != img.Name || md.Annotations[AnnotationRefName] != "v1" {
		t.Errorf("index annotations = %v", md.Annotations)
	}
	var m Manifest
	blob(t, e, md, &m)
	var cfg Config
	blob(t, e, m.Config, &cfg)
	layer := blob(t, e, m.Layers[0], nil)
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != digest(layer) {
		t.Errorf("diff_ids %v, layer digest %s", cfg.RootFS.DiffIDs, digest(layer))
	}
	if got := strings.Join(cfg.Config.Entrypoint, " "); got != "/usr/bin/slipway" {
		t.Errorf("entrypoint = %q", got)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(layer))
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		names = append(names, h.Name+"->"+h.Linkname)
	}
	want := "usr/->,usr/bin/->,usr/bin/kubectl-eds->slipway,usr/bin/slipway->"
	if got := strings.Join(names, ","); got != want {
		t.Errorf("layer entries %s, want %s", got, want)
	}
}

func TestWriteIsReproducible(t *testing.T) {
	img := Image{Name: "localhost/pause:1", Files: []File{{Path: "pause", Mode: 0o755, Data: []byte("x")}}}
	var a, b bytes.Buffer
	if err := Write(&a, img); err != nil {
		t.Fatal(err)
	}
	if err := Write(&b, img); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two writes of the same image differ")
	}
}

func TestWriteRejects(t *testing.T) {
	for _, img := range []Image{
		{Name: "localhost/pause", Files: []File{{Path: "p", Data: []byte("x")}}},
		{Name: "localhost/pause:1", Files: []File{{Path: "/", Data: []byte("x")}}},
	} {
		if err := Write(io.Discard, img); err == nil {
			t.Errorf("Write(%+v) succeeded", img)
		}
	}
}

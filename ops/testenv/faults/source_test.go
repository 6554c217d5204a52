package faults

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/upgrade/channel"
	"slipway.dev/slipway/upgrade/release"
	"slipway.dev/slipway/upgrade/releasetest"
)

// get fetches url and returns its status and body.
func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// The release source serves a mirror as an http channel that slipway's
// channel client reads; each fault changes what it answers, and healed,
// it answers as before.
func TestSourceFaults(t *testing.T) {
	dir := t.TempDir()
	rel, err := releasetest.Write(releasetest.Options{Mirror: dir, Version: "v1", Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ch, err := channel.New(src.URL(), channel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if v, err := ch.Latest(ctx); err != nil || v != "v1" {
		t.Fatalf("latest %q %v, want v1", v, err)
	}
	base := strings.TrimSuffix(src.URL(), "latest") + "download/v1/"
	kernel := release.KernelArtifact(rel.Arch)
	want, err := os.ReadFile(filepath.Join(dir, "v1", kernel))
	if err != nil {
		t.Fatal(err)
	}
	if code, b := get(t, base+kernel); code != 200 || !reflect.DeepEqual(b, want) {
		t.Fatalf("artifact: %d, %d bytes, want 200 and the file's %d", code, len(b), len(want))
	}

	src.SetCorrupt(true)
	sums, err := os.ReadFile(filepath.Join(dir, "v1", "sha256sum-amd64.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if code, b := get(t, base+"sha256sum-amd64.txt"); code != 200 || !reflect.DeepEqual(b, sums) {
		t.Fatalf("the checksum list changed while corrupting (%d)", code)
	}
	if code, b := get(t, base+kernel); code != 200 || len(b) != len(want) || reflect.DeepEqual(b, want) {
		t.Fatalf("corrupt artifact: %d, %d bytes, equal %t; want 200, the same size, other bytes", code, len(b), reflect.DeepEqual(b, want))
	}
	src.SetCorrupt(false)

	src.SetFail(true)
	if _, err := ch.Latest(ctx); err == nil {
		t.Fatal("latest answered while the source fails")
	}
	if code, _ := get(t, base+kernel); code != http.StatusServiceUnavailable {
		t.Fatalf("artifact while failing: %d, want 503", code)
	}
	src.SetFail(false)

	src.SetDelay(300 * time.Millisecond)
	start := time.Now()
	if v, err := ch.Latest(ctx); err != nil || v != "v1" {
		t.Fatalf("latest while slow: %q %v", v, err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("a slow answer came in %s", d)
	}
	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := ch.Latest(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("latest with a shorter deadline than the delay: %v", err)
	}
	src.SetDelay(0)
	if code, b := get(t, base+kernel); code != 200 || !reflect.DeepEqual(b, want) {
		t.Fatalf("healed: %d", code)
	}
	if src.Requests.Load() == 0 || src.Failed.Load() != 2 || src.Corrupted.Load() != 1 {
		t.Fatalf("counts: %d requests, %d failed, %d corrupted", src.Requests.Load(), src.Failed.Load(), src.Corrupted.Load())
	}
}

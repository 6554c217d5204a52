package upgrade_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/channel"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/release"
	"slipway.dev/slipway/upgrade/releasetest"
)

// benchMirror holds a release with a 256 MiB rootfs payload (about 2000
// mostly compressible files), made once and kept under build/bench (or
// $SLIPWAY_BENCH_DIR) between runs.
func benchMirror(b *testing.B) string {
	b.Helper()
	dir := os.Getenv("SLIPWAY_BENCH_DIR")
	if dir == "" {
		dir = filepath.Join("..", "build", "bench")
	}
	mirror, _ := filepath.Abs(filepath.Join(dir, "mirror"))
	if _, err := os.Stat(filepath.Join(mirror, "v256", release.SumsArtifact(arch))); err == nil {
		return mirror
	}
	b.Logf("writing the 256 MiB benchmark release into %s (once)", mirror)
	_, err := releasetest.Write(releasetest.Options{
		Mirror: mirror, Version: "v256", Arch: arch,
		RootfsBytes: 256 << 20, RootfsFiles: 2000, K3sBytes: 8 << 20,
	})
	if err != nil {
		b.Fatal(err)
	}
	return mirror
}

// BenchmarkStageVsK3osPipeline stages the rootfs artifact (verify + extract +
// fsync + swap) and, on the same artifact, runs what k3os's scripts did
// (`sha256sum -c`, then `tar -xzf --strip-components=3`), and reports both
// and their ratio (goal: ratio <= 1).
func BenchmarkStageVsK3osPipeline(b *testing.B) {
	mirror := benchMirror(b)
	src, err := channel.New(mirror, channel.Options{})
	if err != nil {
		b.Fatal(err)
	}
	work, _ := filepath.Abs(filepath.Join(mirror, "..", "work"))
	var slipway, pipeline time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		reset(b, work)
		b.StartTimer()
		start := time.Now()
		_, err := upgrade.Run(context.Background(), upgrade.Options{
			SystemDir: filepath.Join(work, "slipway"), Source: src, Version: "v256", Arch: arch,
			Components: []layout.Component{layout.Rootfs, layout.K3s}, LockFile: filepath.Join(work, "lock"),
		})
		if err != nil {
			b.Fatal(err)
		}
		slipway += time.Since(start)
		start = time.Now()
		k3osPipeline(b, filepath.Join(mirror, "v256"), filepath.Join(work, "k3os"))
		pipeline += time.Since(start)
	}
	b.StopTimer()
	reset(b, work)
	n := float64(b.N)
	b.ReportMetric(slipway.Seconds()/n, "slipway-s/op")
	b.ReportMetric(pipeline.Seconds()/n, "k3os-pipeline-s/op")
	b.ReportMetric(slipway.Seconds()/pipeline.Seconds(), "ratio")
	fmt.Printf("rootfs 256 MiB: slipway %.2fs (verify+extract+fsync+swap), k3os pipeline %.2fs (sha256sum -c; tar -xzf), ratio %.2f\n",
		slipway.Seconds()/n, pipeline.Seconds()/n, slipway.Seconds()/pipeline.Seconds())
}

func reset(b *testing.B, work string) {
	b.Helper()
	if err := os.RemoveAll(work); err != nil {
		b.Fatal(err)
	}
	for _, d := range []string{"slipway", "k3os"} {
		if err := os.MkdirAll(filepath.Join(work, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	exec.Command("sync").Run() // start each round with no dirty pages of the last one
}

// k3osPipeline verifies the rootfs with sha256sum -c, then unpacks it.
func k3osPipeline(b *testing.B, rel, sys string) {
	b.Helper()
	sums, err := os.ReadFile(filepath.Join(rel, release.SumsArtifact(arch)))
	if err != nil {
		b.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(sums), "\n") {
		if strings.HasSuffix(l, release.RootfsArtifact(arch)) {
			line = l + "\n"
		}
	}
	check := exec.Command("sha256sum", "-c", "-")
	check.Dir, check.Stdin = rel, strings.NewReader(line)
	if out, err := check.CombinedOutput(); err != nil {
		b.Fatalf("sha256sum -c: %v %s", err, out)
	}
	untar := exec.Command("tar", "-xzf", filepath.Join(rel, release.RootfsArtifact(arch)), "--strip-components=3", "-C", sys)
	if out, err := untar.CombinedOutput(); err != nil {
		b.Fatalf("tar: %v %s", err, out)
	}
}

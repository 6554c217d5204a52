package upgrade_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
// (`sha256sum -c`, then `tar -xzf --strip-components=3`). Each contender
// starts from the same state (an empty output folder, no dirty pages, and
// as root a dropped page cache with the artifact read back in); the order
// alternates between rounds. It reports each round's wall and CPU times and
// their ratios, and the medians (goal: wall ratio <= 0.8).
func BenchmarkStageVsK3osPipeline(b *testing.B) {
	mirror := benchMirror(b)
	src, err := channel.New(mirror, channel.Options{})
	if err != nil {
		b.Fatal(err)
	}
	work, _ := filepath.Abs(filepath.Join(mirror, "..", "work"))
	rel := filepath.Join(mirror, "v256")
	stage := func() {
		_, err := upgrade.Run(context.Background(), upgrade.Options{
			SystemDir: filepath.Join(work, "slipway"), Source: src, Version: "v256", Arch: arch,
			Components: []layout.Component{layout.Rootfs, layout.K3s}, LockFile: filepath.Join(work, "lock"),
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	pipeline := func() { k3osPipeline(b, rel, filepath.Join(work, "k3os")) }
	settle := func() { settleBench(b, work, filepath.Join(rel, release.RootfsArtifact(arch))) }
	var rounds []benchRound
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var r benchRound
		if i%2 == 0 {
			r.slipway = measure(b, settle, stage, false)
			r.pipeline = measure(b, settle, pipeline, true)
		} else {
			r.pipeline = measure(b, settle, pipeline, true)
			r.slipway = measure(b, settle, stage, false)
		}
		r.print(i, i%2 == 0)
		rounds = append(rounds, r)
	}
	b.StopTimer()
	settle()
	reportRounds(b, rounds)
}

// benchRound holds one round's timings of both contenders.
type benchRound struct{ slipway, pipeline timing }

// timing is one contender's wall time and the CPU time (user+sys) it used.
type timing struct{ wall, cpu time.Duration }

func (r benchRound) wallRatio() float64 { return r.slipway.wall.Seconds() / r.pipeline.wall.Seconds() }
func (r benchRound) cpuRatio() float64  { return r.slipway.cpu.Seconds() / r.pipeline.cpu.Seconds() }

func (r benchRound) print(i int, slipwayFirst bool) {
	first := "pipeline first"
	if slipwayFirst {
		first = "slipway first"
	}
	fmt.Printf("round %d (%s, load %s): slipway %.2fs wall %.2fs cpu, pipeline %.2fs wall %.2fs cpu, ratio wall %.2f cpu %.2f\n",
		i+1, first, loadAverage(), r.slipway.wall.Seconds(), r.slipway.cpu.Seconds(),
		r.pipeline.wall.Seconds(), r.pipeline.cpu.Seconds(), r.wallRatio(), r.cpuRatio())
}

// reportRounds reports the medians over the rounds.
func reportRounds(b *testing.B, rounds []benchRound) {
	pick := func(f func(benchRound) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = f(r)
		}
		return median(v)
	}
	sw := pick(func(r benchRound) float64 { return r.slipway.wall.Seconds() })
	pw := pick(func(r benchRound) float64 { return r.pipeline.wall.Seconds() })
	sc := pick(func(r benchRound) float64 { return r.slipway.cpu.Seconds() })
	pc := pick(func(r benchRound) float64 { return r.pipeline.cpu.Seconds() })
	wr, cr := pick(benchRound.wallRatio), pick(benchRound.cpuRatio)
	b.ReportMetric(sw, "slipway-s/op")
	b.ReportMetric(pw, "k3os-pipeline-s/op")
	b.ReportMetric(wr, "ratio")
	b.ReportMetric(cr, "cpu-ratio")
	fmt.Printf("rootfs 256 MiB, median of %d rounds (load %s): slipway %.2fs wall %.2fs cpu (verify+extract+fsync+swap), "+
		"k3os pipeline %.2fs wall %.2fs cpu (sha256sum -c; tar -xzf), ratio wall %.2f cpu %.2f\n",
		len(rounds), loadAverage(), sw, sc, pw, pc, wr, cr)
}

func median(v []float64) float64 {
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// measure settles the machine, then times run: its wall time and the CPU
// time of this process (children: of the processes it started and waited for).
func measure(b *testing.B, settle, run func(), children bool) timing {
	b.StopTimer()
	settle()
	b.StartTimer()
	who := unix.RUSAGE_SELF
	if children {
		who = unix.RUSAGE_CHILDREN
	}
	cpu0, start := cpuTime(b, who), time.Now()
	run()
	return timing{wall: time.Since(start), cpu: cpuTime(b, who) - cpu0}
}

func cpuTime(b *testing.B, who int) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(who, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// settleBench empties the output folders and writes back every dirty page,
// so that no contender pays for the other's writeback. As root it also drops
// the page cache: ext4 without a journal scans past inodes deleted in the
// last minute while their inode table is cached, which made each round
// slower than the last. Then it reads the artifact, so both find it cached.
func settleBench(b *testing.B, work, artifact string) {
	b.Helper()
	if err := os.RemoveAll(work); err != nil {
		b.Fatal(err)
	}
	for _, d := range []string{"slipway", "k3os"} {
		if err := os.MkdirAll(filepath.Join(work, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	unix.Sync()
	if os.Geteuid() == 0 {
		_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
	}
	f, err := os.Open(artifact)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(io.Discard, f); err != nil {
		b.Fatal(err)
	}
}

// loadAverage is the 1-, 5- and 15-minute load average, as uptime prints it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
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

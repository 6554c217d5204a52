package benchside

import (
	"testing"
	"time"
)

func TestParseCPULine(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       cpuTimes
		wantErr    bool
	}{
		{"a 6.x kernel", "cpu  100 5 50 800 20 1 2 3 0 0", cpuTimes{total: 981, idle: 820}, false},
		{"an old kernel's four fields and iowait", "cpu 10 0 10 80 0", cpuTimes{total: 100, idle: 80}, false},
		{"a core's line", "cpu0 10 0 10 80 0", cpuTimes{}, true},
		{"too short", "cpu 10 0", cpuTimes{}, true},
		{"not a number", "cpu 10 0 x 80 0", cpuTimes{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCPULine(tc.line)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want an error: %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	t0 := time.Unix(0, 0)
	// at is the sample i of a sampler reading every 250 ms.
	at := func(i int, total, idle uint64) cpuTimes {
		return cpuTimes{total: total, idle: idle, at: t0.Add(time.Duration(i) * 250 * time.Millisecond)}
	}
	for _, tc := range []struct {
		name    string
		samples []cpuTimes
		want    MachineCPU
	}{
		{"no interval", []cpuTimes{at(0, 100, 50)}, MachineCPU{}},
		{"idle", []cpuTimes{at(0, 0, 0), at(1, 100, 100), at(2, 200, 200)}, MachineCPU{Busy: 0}},
		{"one interval full, one half", []cpuTimes{at(0, 0, 0), at(1, 100, 0), at(2, 200, 50)}, MachineCPU{Busy: 0.75, Saturated: 250 * time.Millisecond}},
		{"at the threshold counts", []cpuTimes{at(0, 0, 0), at(1, 100, 5)}, MachineCPU{Busy: 0.95, Saturated: 250 * time.Millisecond}},
		{"just below does not", []cpuTimes{at(0, 0, 0), at(1, 100, 6)}, MachineCPU{Busy: 0.94}},
		{"no ticks between two samples", []cpuTimes{at(0, 0, 0), at(1, 0, 0)}, MachineCPU{}},
		{"a late sample counts its whole interval", []cpuTimes{at(0, 0, 0), at(3, 300, 0)}, MachineCPU{Busy: 1, Saturated: 750 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := summarize(tc.samples)
			if got.Saturated != tc.want.Saturated || got.Busy < tc.want.Busy-1e-9 || got.Busy > tc.want.Busy+1e-9 {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSampleMachineSeesThisMachine(t *testing.T) {
	m := SampleMachine(20 * time.Millisecond)
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) { // keep one core busy
	}
	got := m.Stop()
	if got.Busy <= 0 || got.Busy > 1 {
		t.Errorf("busy share %v over a busy loop: want within (0, 1]", got.Busy)
	}
}

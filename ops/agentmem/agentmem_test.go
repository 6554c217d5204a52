package agentmem

import (
	"strings"
	"testing"
	"time"
)

func TestUnmapDue(t *testing.T) {
	for _, tc := range []struct {
		name        string
		drop, unmap time.Duration
		due         []int // ticks 0..10 that unmap
	}{
		{"defaults: every tenth minute", time.Minute, 10 * time.Minute, []int{0, 10}},
		{"unmap as often as drop", time.Minute, time.Minute, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{"unmap more often than drop: every tick", time.Minute, time.Second, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{"not a multiple: rounded down", time.Minute, 150 * time.Second, []int{0, 2, 4, 6, 8, 10}},
		{"zero drop: every tick", 0, time.Minute, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			for tick := 0; tick <= 10; tick++ {
				if unmapDue(tick, tc.drop, tc.unmap) {
					got = append(got, tick)
				}
			}
			if !equal(got, tc.due) {
				t.Errorf("unmapped at ticks %v, want %v", got, tc.due)
			}
		})
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReadOnlyMappings(t *testing.T) {
	const exe = "/usr/bin/slipway"
	for _, tc := range []struct {
		name string
		maps string
		want []Range
	}{
		{"text and read-only data, not data, bss or the heap", `00400000-012be000 r-xp 00000000 fe:00 10485777                           /usr/bin/slipway
012be000-023ea000 r--p 00ebe000 fe:00 10485777                           /usr/bin/slipway
023ea000-02475000 rw-p 01fea000 fe:00 10485777                           /usr/bin/slipway
02475000-044be000 rw-p 00000000 00:00 0
c000000000-c000400000 rw-p 00000000 00:00 0
7ffd1c5e6000-7ffd1c5e8000 r-xp 00000000 00:00 0                          [vdso]`,
			[]Range{{0x400000, 0x12be000}, {0x12be000, 0x23ea000}}},
		{"another file's mappings", `00400000-012be000 r-xp 00000000 fe:00 1 /usr/bin/other
7f0000000000-7f0000001000 r--p 00000000 fe:00 2 /usr/bin/slipway.old`, nil},
		{"shared or writable mappings of the binary", `00400000-00500000 r--s 00000000 fe:00 1 /usr/bin/slipway
00500000-00600000 rwxp 00000000 fe:00 1 /usr/bin/slipway`, nil},
		{"the binary replaced on disk", `00400000-00500000 r-xp 00000000 fe:00 1 /usr/bin/slipway (deleted)`, nil},
		{"malformed lines", `zz-00500000 r-xp 00000000 fe:00 1 /usr/bin/slipway
00500000 r-xp 00000000 fe:00 1 /usr/bin/slipway
00600000-00500000 r-xp 00000000 fe:00 1 /usr/bin/slipway

garbage`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadOnlyMappings(strings.NewReader(tc.maps), exe)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("mapping %d: got %#x-%#x, want %#x-%#x", i, got[i].Start, got[i].End, tc.want[i].Start, tc.want[i].End)
				}
			}
		})
	}
}

func TestSplitParse(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       Split
		wantErr    bool
	}{
		{"status", "Name:\tslipway\nVmRSS:\t   28956 kB\nRssAnon:\t    5424 kB\nRssFile:\t   23532 kB\nRssShmem:\t       0 kB\n",
			Split{RSS: 28956, Anon: 5424, File: 23532}, false},
		{"smaps_rollup", "00400000-7ffd1c5e8000 ---p 00000000 00:00 0    [rollup]\nRss:               28956 kB\nPss:               17860 kB\nPss_Dirty:          5424 kB\nPss_Anon:           5424 kB\nPss_File:          12436 kB\n",
			Split{PSS: 17860, PSSAnon: 5424, PSSFile: 12436}, false},
		{"a bad number", "VmRSS:\tlots kB\n", Split{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Split
			err := got.parse(strings.NewReader(tc.text))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want an error: %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestProcs(t *testing.T) {
	for _, tc := range []struct {
		name         string
		env          string
		current, max int
		want         int
		set          bool
	}{
		{"a big node: capped", "", 32, MaxProcs, MaxProcs, true},
		{"just above the cap", "", MaxProcs + 1, MaxProcs, MaxProcs, true},
		{"at the cap: left alone", "", MaxProcs, MaxProcs, MaxProcs, false},
		{"one CPU: left alone", "", 1, MaxProcs, 1, false},
		{"the environment chose", "16", 16, MaxProcs, 16, false},
		{"an agent that asks for one", "", 2, 1, 1, true},
		{"one asked, the environment chose", "2", 2, 1, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, set := procs(tc.env, tc.current, tc.max)
			if got != tc.want || set != tc.set {
				t.Errorf("procs(%q, %d, %d) = %d, %v; want %d, %v", tc.env, tc.current, tc.max, got, set, tc.want, tc.set)
			}
		})
	}
}

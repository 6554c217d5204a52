package agentmem

import (
	"strings"
	"testing"
)

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

func TestReadStatusReadsNoPSS(t *testing.T) {
	whole, err := ReadSplit("self")
	if err != nil {
		t.Fatal(err)
	}
	status, err := ReadStatus("self")
	if err != nil {
		t.Fatal(err)
	}
	if whole.PSS == 0 || whole.RSS == 0 {
		t.Fatalf("ReadSplit(self) = %+v: want its RSS and PSS", whole)
	}
	if status.RSS == 0 || status.Anon == 0 || status.PSS != 0 {
		t.Errorf("ReadStatus(self) = %+v: want its RSS and anonymous memory, and no PSS (smaps_rollup not read)", status)
	}
}

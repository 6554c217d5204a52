package progress

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

func TestHumanBytes(t *testing.T) {
	tests := map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		3 << 20: "3.0 MiB", 5<<30 + 1<<29: "5.5 GiB", 2 << 40: "2.0 TiB", 3 << 50: "3.0 PiB", 4096 << 50: "4096.0 PiB",
	}
	for n, want := range tests {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestPercent(t *testing.T) {
	tests := []struct {
		done, total int64
		want        int
	}{{0, 100, 0}, {1, 3, 33}, {99, 100, 99}, {100, 100, 100}, {150, 100, 100}, {0, 0, 100}, {5, -1, 100}}
	for _, tt := range tests {
		if got := percent(tt.done, tt.total); got != tt.want {
			t.Errorf("percent(%d, %d) = %d, want %d", tt.done, tt.total, got, tt.want)
		}
	}
}

func TestBar(t *testing.T) {
	tests := []struct {
		done, total int64
		want        string
	}{
		{0, 100, "          "},
		{10, 100, ">         "},
		{55, 100, "====>     "},
		{99, 100, "========> "},
		{100, 100, "=========="},
		{0, 0, "=========="},
		{200, 100, "=========="},
	}
	for _, tt := range tests {
		if got := bar(tt.done, tt.total, 10); got != tt.want {
			t.Errorf("bar(%d, %d) = %q, want %q", tt.done, tt.total, got, tt.want)
		}
	}
}

func TestPlainLine(t *testing.T) {
	s := snapshot{name: "rootfs", done: 3 << 20, total: 12 << 20, elapsed: 2 * time.Second}
	unknown := s
	unknown.total = -1
	still := s
	still.elapsed = 0
	cut := fmt.Errorf("x: truncated: %w", io.ErrUnexpectedEOF)
	tests := []struct {
		s    snapshot
		o    outcome
		err  error
		want string
	}{
		{s, outcomeRunning, nil, "rootfs: 3.0 MiB of 12.0 MiB (25%), 1.5 MiB/s"},
		{unknown, outcomeRunning, nil, "rootfs: 3.0 MiB, 1.5 MiB/s"},
		{still, outcomeRunning, nil, "rootfs: 3.0 MiB of 12.0 MiB (25%), -"},
		{s, outcomeDone, nil, "rootfs: 3.0 MiB of 12.0 MiB (25%) in 2s, 1.5 MiB/s"},
		{s, outcomeFailed, errors.New("boom"), "rootfs: failed after 3.0 MiB of 12.0 MiB (25%): boom"},
		{s, outcomeFailed, cut, "rootfs: failed after 3.0 MiB of 12.0 MiB (25%): unexpected EOF"},
		{s, outcomeStopped, nil, "rootfs: stopped after 3.0 MiB of 12.0 MiB (25%)"},
	}
	for _, tt := range tests {
		if got := plainLine(tt.s, tt.o, tt.err); got != tt.want {
			t.Errorf("plainLine(%+v, %d) = %q, want %q", tt.s, tt.o, got, tt.want)
		}
	}
}

func TestBarLine(t *testing.T) {
	s := snapshot{name: "kernel", done: 512, total: 1024, elapsed: time.Second}
	got := barLine(s, 200)
	want := "\rkernel [==============>               ] 512 B / 1.0 KiB  50%  512 B/s" + clearToEOL
	if got != want {
		t.Errorf("barLine = %q\nwant     %q", got, want)
	}
	s.total = -1
	if got, want := barLine(s, 200), "\rkernel 512 B  512 B/s"+clearToEOL; got != want {
		t.Errorf("barLine, unknown total = %q, want %q", got, want)
	}
	if got := barLine(snapshot{name: strings.Repeat("n", 100), total: 1}, 40); len(got) != len("\r")+39+len(clearToEOL) {
		t.Errorf("barLine does not fit 40 columns: %q", got)
	}
}

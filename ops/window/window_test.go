package window

import (
	"testing"
	"time"
)

func at(t *testing.T, s, tz string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name           string
		days           []string
		start, end, tz string
	}{
		{"bad day", []string{"funday"}, "01:00", "02:00", ""},
		{"bad start", nil, "25:00", "02:00", ""},
		{"bad end", nil, "01:00", "2pm", ""},
		{"empty start", nil, "", "02:00", ""},
		{"bad zone", nil, "01:00", "02:00", "Mars/Olympus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.days, tc.start, tc.end, tc.tz); err == nil {
				t.Fatal("Parse accepted a bad window")
			}
		})
	}
}

func TestContains(t *testing.T) {
	// 2026-11-23 is a Monday.
	for _, tc := range []struct {
		name           string
		days           []string
		start, end, tz string
		when, whenTZ   string
		want           bool
	}{
		{"inside", []string{"mon"}, "01:00", "03:00", "UTC", "2026-11-23 02:00", "UTC", true},
		{"start is inside", []string{"mon"}, "01:00", "03:00", "UTC", "2026-11-23 01:00", "UTC", true},
		{"end is outside", []string{"mon"}, "01:00", "03:00", "UTC", "2026-11-23 03:00", "UTC", false},
		{"wrong day", []string{"tue"}, "01:00", "03:00", "UTC", "2026-11-23 02:00", "UTC", false},
		{"full day names, any case", []string{"Monday"}, "01:00", "03:00", "UTC", "2026-11-23 02:00", "UTC", true},
		{"no days means every day", nil, "01:00", "03:00", "UTC", "2026-11-25 02:00", "UTC", true},
		{"midnight crossing, before midnight", []string{"mon"}, "22:00", "02:00", "UTC", "2026-11-23 23:30", "UTC", true},
		{"midnight crossing, after midnight next day", []string{"mon"}, "22:00", "02:00", "UTC", "2026-11-24 01:30", "UTC", true},
		{"midnight crossing, after midnight of the day itself", []string{"mon"}, "22:00", "02:00", "UTC", "2026-11-23 01:30", "UTC", false},
		{"midnight crossing, after end", []string{"mon"}, "22:00", "02:00", "UTC", "2026-11-24 02:30", "UTC", false},
		{"start equals end is the whole day", []string{"mon"}, "00:00", "00:00", "UTC", "2026-11-23 23:59", "UTC", true},
		{"time zone applied", []string{"mon"}, "01:00", "03:00", "Europe/Berlin", "2026-11-23 02:30", "UTC", false},
		{"time zone applied, inside", []string{"mon"}, "01:00", "03:00", "Europe/Berlin", "2026-11-23 00:30", "UTC", true},
		{"time zone moves the day", []string{"tue"}, "01:00", "03:00", "Asia/Tokyo", "2026-11-23 17:00", "UTC", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := Parse(tc.days, tc.start, tc.end, tc.tz)
			if err != nil {
				t.Fatal(err)
			}
			if got := w.Contains(at(t, tc.when, tc.whenTZ)); got != tc.want {
				t.Fatalf("Contains = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNilWindowIsAlwaysOpen(t *testing.T) {
	var w *Window
	now := time.Now()
	if !w.Contains(now) || !w.Next(now).Equal(now) {
		t.Fatal("a nil window must always be open")
	}
}

func TestNext(t *testing.T) {
	w, err := Parse([]string{"wed"}, "22:00", "02:00", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	got := w.Next(at(t, "2026-11-23 10:17", "UTC"))
	if want := at(t, "2026-11-25 22:00", "UTC"); !got.Equal(want) {
		t.Fatalf("Next = %v, want %v", got, want)
	}
	inside := at(t, "2026-11-26 01:00", "UTC")
	if got := w.Next(inside); !got.Equal(inside) {
		t.Fatalf("Next inside = %v, want the same instant", got)
	}
}

// Package window decides whether an instant falls inside a maintenance
// window: a set of week days, a start and an end time of day ("HH:MM") and
// an IANA time zone. A window whose end is not after its start crosses
// midnight: it opens on a listed day and closes the next day. A window whose
// start equals its end lasts the whole day. It is pure: no clock, no I/O.
package window

import (
	"fmt"
	"strings"
	"time"

	// Nodes running the static binary may have no zoneinfo on disk.
	_ "time/tzdata"
)

// Window is a parsed maintenance window. The zero value is not valid; a nil
// *Window means "always open".
type Window struct {
	days  [7]bool // indexed by time.Weekday; the day the window opens
	start int     // minutes after midnight
	end   int     // minutes after midnight
	loc   *time.Location
}

var dayNames = map[string]time.Weekday{
	"sun": time.Sunday, "sunday": time.Sunday,
	"mon": time.Monday, "monday": time.Monday,
	"tue": time.Tuesday, "tuesday": time.Tuesday,
	"wed": time.Wednesday, "wednesday": time.Wednesday,
	"thu": time.Thursday, "thursday": time.Thursday,
	"fri": time.Friday, "friday": time.Friday,
	"sat": time.Saturday, "saturday": time.Saturday,
}

// Parse builds a window. days holds day names ("mon" or "monday", any
// case); none means every day. start and end are "HH:MM" (24 h). tz is an
// IANA zone name ("" means UTC).
func Parse(days []string, start, end, tz string) (*Window, error) {
	w := &Window{}
	if len(days) == 0 {
		for i := range w.days {
			w.days[i] = true
		}
	}
	for _, d := range days {
		wd, ok := dayNames[strings.ToLower(strings.TrimSpace(d))]
		if !ok {
			return nil, fmt.Errorf("window day %q is not a day of the week: use mon, tue, wed, thu, fri, sat or sun", d)
		}
		w.days[wd] = true
	}
	var err error
	if w.start, err = parseClock(start); err != nil {
		return nil, fmt.Errorf("window start: %w", err)
	}
	if w.end, err = parseClock(end); err != nil {
		return nil, fmt.Errorf("window end: %w", err)
	}
	if tz == "" {
		tz = "UTC"
	}
	if w.loc, err = time.LoadLocation(tz); err != nil {
		return nil, fmt.Errorf("window time zone %q is not an IANA zone name (such as Europe/Berlin): %w", tz, err)
	}
	return w, nil
}

func parseClock(s string) (int, error) {
	t, err := time.Parse("15:04", strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a time of day: write it as HH:MM, 24-hour", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// Contains reports whether t is inside the window. A nil window always is.
func (w *Window) Contains(t time.Time) bool {
	if w == nil {
		return true
	}
	_, ok := w.openAt(t)
	return ok
}

// Next returns the first instant at or after t that is inside the window.
// A nil window returns t. It looks at most eight days ahead.
func (w *Window) Next(t time.Time) time.Time {
	if w == nil || w.Contains(t) {
		return t
	}
	y, m, d := t.In(w.loc).Date()
	for i := -1; i <= 8; i++ {
		if open, _, ok := w.interval(y, m, d+i); ok && !open.Before(t) {
			return open
		}
	}
	return t // unreachable for a parsed window: every window opens within a week
}

// Remaining is how long the window stays open from t without a break (0
// when t is outside it; a nil window: effectively forever). Windows of
// consecutive days that touch or overlap count as one.
func (w *Window) Remaining(t time.Time) time.Duration {
	if w == nil {
		return 1<<63 - 1
	}
	end, ok := w.openAt(t)
	if !ok {
		return 0
	}
	y, m, d := t.In(w.loc).Date()
	for i := 0; i <= 8; i++ {
		if open, close, ok := w.interval(y, m, d+i); ok && !open.After(end) && close.After(end) {
			end = close
		}
	}
	return end.Sub(t)
}

// openAt returns the end of the window's opening that contains t.
func (w *Window) openAt(t time.Time) (time.Time, bool) {
	y, m, d := t.In(w.loc).Date()
	for i := -2; i <= 0; i++ {
		if open, close, ok := w.interval(y, m, d+i); ok && !t.Before(open) && t.Before(close) {
			return close, true
		}
	}
	return time.Time{}, false
}

// interval is the opening of the window on the day y-m-d (day may be out
// of range: time.Date normalises it), if that day is one of its days. It
// opens at the first instant the wall clock reads start or later (in a
// daylight-saving gap: when the clock jumps past it; in an overlap: at the
// first of the two) and lasts as long as the window says, in real time: a
// window in a gap or an overlap is not cut short or stretched. A whole-day
// window lasts the calendar day.
func (w *Window) interval(y int, m time.Month, day int) (open, close time.Time, ok bool) {
	midnight := time.Date(y, m, day, 0, 0, 0, 0, w.loc)
	if !w.days[midnight.Weekday()] {
		return open, close, false
	}
	if w.start == w.end {
		return firstAtOrAfter(y, m, day, 0, w.loc), firstAtOrAfter(y, m, day+1, 0, w.loc), true
	}
	open = firstAtOrAfter(y, m, day, w.start, w.loc)
	length := time.Duration((w.end-w.start+24*60)%(24*60)) * time.Minute
	return open, open.Add(length), true
}

// firstAtOrAfter is the first instant of the day y-m-day whose wall clock in
// loc reads minute (after midnight) or later.
func firstAtOrAfter(y int, m time.Month, day, minute int, loc *time.Location) time.Time {
	t := time.Date(y, m, day, minute/60, minute%60, 0, 0, loc)
	if wall(t) == minute {
		// An overlap shows the same wall clock twice: take the earlier.
		for back := 15 * time.Minute; back <= 3*time.Hour; back += 15 * time.Minute {
			if e := t.Add(-back); wall(e) == minute && e.Day() == t.Day() {
				t = e
			}
		}
		return t
	}
	// In a gap: move to the instant the clock jumped past minute.
	for i := 0; wall(t) < minute && i < 3*60; i++ {
		t = t.Add(time.Minute)
	}
	for wall(t.Add(-time.Minute)) >= minute && t.Add(-time.Minute).Day() == t.Day() {
		t = t.Add(-time.Minute)
	}
	return t
}

// wall is t's wall-clock minute after midnight.
func wall(t time.Time) int { return t.Hour()*60 + t.Minute() }

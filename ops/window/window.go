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
	local := t.In(w.loc)
	minute := local.Hour()*60 + local.Minute()
	today := local.Weekday()
	yesterday := (today + 6) % 7
	switch {
	case w.start == w.end: // whole day
		return w.days[today]
	case w.start < w.end:
		return w.days[today] && minute >= w.start && minute < w.end
	default: // crosses midnight
		return (w.days[today] && minute >= w.start) || (w.days[yesterday] && minute < w.end)
	}
}

// Next returns the first instant at or after t that is inside the window,
// to the minute. A nil window returns t. It looks at most eight days ahead.
func (w *Window) Next(t time.Time) time.Time {
	if w == nil || w.Contains(t) {
		return t
	}
	c := t.In(w.loc).Truncate(time.Minute).Add(time.Minute)
	for i := 0; i < 8*24*60; i++ {
		if w.Contains(c) {
			return c
		}
		c = c.Add(time.Minute)
	}
	return t // unreachable for a parsed window: every window opens within a week
}

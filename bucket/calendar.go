package bucket

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Calendar aligns a FixedWindow limit's windows to a time zone's calendar
// (Limit.Calendar) instead of multiples of Period: a day starts at local
// midnight, a week at local midnight on Monday (ISO 8601), a month at
// local midnight of the 1st, a year at local midnight of January 1st.
// Windows are as long as the zone makes them: a day across a
// daylight-saving change lasts 23 or 25 hours. A limit holds a pointer to
// one (immutable, shared), which keeps Limit to five words: Decide takes
// it by value on every check.
type Calendar struct {
	Unit Unit
	Zone *time.Location // nil: UTC
}

// Unit is a calendar unit.
type Unit uint8

// The calendar units. The zero value is NoUnit: no calendar.
const (
	NoUnit Unit = iota
	Day
	Week
	Month
	Year
)

var calendarNames = [...]string{
	NoUnit: "",
	Day:    "day",
	Week:   "week",
	Month:  "month",
	Year:   "year",
}

// ErrUnknownCalendar is returned (wrapped) for a calendar name or value
// that is not one of the constants above.
var ErrUnknownCalendar = errors.New("bucket: unknown calendar unit")

// ParseUnit maps the rules-file name of a calendar unit to its value; the
// empty string means NoUnit.
func ParseUnit(s string) (Unit, error) {
	for c, name := range calendarNames {
		if s == name {
			return Unit(c), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want day, week, month or year)", ErrUnknownCalendar, s)
}

// String returns the rules-file name ("" for NoUnit), or "calendar(N)"
// for an unknown value.
func (c Unit) String() string {
	if c.valid() {
		return calendarNames[c]
	}
	return "calendar(" + strconv.Itoa(int(c)) + ")"
}

func (c Unit) valid() bool { return int(c) < len(calendarNames) }

// Nominal is the unit's usual length: 24 h, 7 days, 30 days, 365 days
// (0 for NoUnit). A calendar limit carries it as its Period, which
// reports say as the window's length; the windows themselves are as long
// as the calendar makes them.
func (c Unit) Nominal() time.Duration {
	const day = 24 * time.Hour
	switch c {
	case Day:
		return day
	case Week:
		return 7 * day
	case Month:
		return 30 * day
	case Year:
		return 365 * day
	}
	return 0
}

// Longest bounds the length of one window of the unit in any zone: the
// longest such span on a plain clock (24 h, 7 days, 31 days, 366 days)
// plus 26 h, which covers a daylight-saving shift of up to 2 h and a zone
// moving across the date line by a whole day (a day lived twice).
// Limit.IdleAfter answers it for a calendar limit.
func (c Unit) Longest() time.Duration {
	const day = 24 * time.Hour
	var n time.Duration
	switch c {
	case Day:
		n = day
	case Week:
		n = 7 * day
	case Month:
		n = 31 * day
	case Year:
		n = 366 * day
	default:
		return 0
	}
	return n + 26*time.Hour
}

// bounds is the local midnight starting the unit that holds the date
// y-m-d, and the one starting the next unit.
func (c Unit) bounds(y int, m time.Month, d int, wd time.Weekday, loc *time.Location) (start, end time.Time) {
	switch c {
	case Day:
		return time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case Week:
		back := (int(wd) + 6) % 7 // days since Monday
		return time.Date(y, m, d-back, 0, 0, 0, 0, loc), time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	case Month:
		return time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	default:
		return time.Date(y, 1, 1, 0, 0, 0, 0, loc), time.Date(y+1, 1, 1, 0, 0, 0, 0, loc)
	}
}

// window is the calendar window [start, end) holding now (unix ns) in loc
// (nil: UTC): pure arithmetic on the given instant, no clock. Where a
// zone's midnight does not exist (a change at 00:00), time.Date resolves
// it to one side of the change; the window then starts there, and every
// window is computed the same way, so they still tile the line without
// gaps or overlaps.
func (c Unit) window(now int64, loc *time.Location) (start, end int64) {
	if loc == nil {
		loc = time.UTC
	}
	t := time.Unix(0, now).In(loc)
	y, m, d := t.Date()
	s, e := c.bounds(y, m, d, t.Weekday(), loc)
	// A midnight resolved to the far side of a change may leave now just
	// outside the unit of its own date: step to the neighbour that holds
	// it (at most once each way).
	if !t.Before(e) {
		s = e
		e2 := e.In(loc)
		_, e = c.bounds(e2.Year(), e2.Month(), e2.Day(), e2.Weekday(), loc)
		if !e.After(s) { // cannot happen in any known zone; keep progress
			e = s.Add(c.Nominal())
		}
	} else if t.Before(s) {
		e = s
		p := s.Add(-time.Nanosecond).In(loc)
		s, _ = c.bounds(p.Year(), p.Month(), p.Day(), p.Weekday(), loc)
	}
	return s.UnixNano(), e.UnixNano()
}

package bucket

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
	_ "time/tzdata" // the same zone database on every machine
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func calLimit(c Unit, rate int64, loc *time.Location) Limit {
	return Limit{Algorithm: FixedWindow, Rate: rate, Period: c.Nominal(), Calendar: &Calendar{Unit: c, Zone: loc}}
}

// at is a wall-clock time in loc, as unix ns (the fake clock's reading).
func at(loc *time.Location, y int, m time.Month, d, h, min, sec, ns int) int64 {
	return time.Date(y, m, d, h, min, sec, ns, loc).UnixNano()
}

// A monthly quota in Europe/Berlin resets at local midnight of the 1st,
// across the change to summer time (March 2026 is 31 days less an hour
// long) and back (October is 31 days and an hour).
func TestCalendarMonthBerlinAcrossDST(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	l := calLimit(Month, 3, berlin)
	var s State
	var r Result
	now := at(berlin, 2026, 3, 15, 12, 0, 0, 0)
	for i := range 3 {
		if s, r = Decide(s, l, 1, now); !r.Allowed || r.Remaining != int64(2-i) {
			t.Fatalf("take %d: %+v", i, r)
		}
	}
	april := time.Date(2026, 4, 1, 0, 0, 0, 0, berlin)
	if got := april.UTC(); got != time.Date(2026, 3, 31, 22, 0, 0, 0, time.UTC) {
		t.Fatalf("April 1st in Berlin is %v", got)
	}
	if s.A != at(berlin, 2026, 3, 1, 0, 0, 0, 0) || time.Duration(s.C) != 31*24*time.Hour-time.Hour {
		t.Fatalf("state %+v: want the window [March 1st, April 1st) Berlin, 31 days less an hour", s)
	}
	_, r = Decide(s, l, 1, now)
	if r.Allowed || r.RetryAfter != time.Unix(0, april.UnixNano()).Sub(time.Unix(0, now)) || r.ResetAfter != r.RetryAfter {
		t.Fatalf("over the quota: %+v, want retry and reset at %v", r, april)
	}
	// The last nanosecond of March (summer time already) is still March.
	last := april.UnixNano() - 1
	if _, r = Decide(s, l, 1, last); r.Allowed || r.RetryAfter != 1 {
		t.Fatalf("at the last ns of March: %+v", r)
	}
	// UTC midnight of April 1st is two hours into the Berlin month: the
	// quota has reset by then, and not before local midnight.
	if _, r = Decide(s, l, 1, april.UnixNano()); !r.Allowed || r.Remaining != 2 {
		t.Fatalf("at local midnight of April 1st: %+v", r)
	}
	// October: the change back makes the month 31 days and an hour.
	oct := at(berlin, 2026, 10, 31, 23, 30, 0, 0)
	s, r = Decide(State{}, l, 3, oct)
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, berlin)
	if !r.Allowed || time.Duration(s.C) != 31*24*time.Hour+time.Hour || r.ResetAfter != 30*time.Minute {
		t.Fatalf("October: %+v %+v", s, r)
	}
	if _, r = Decide(s, l, 1, nov.UnixNano()-1); r.Allowed {
		t.Fatalf("October's last ns: %+v", r)
	}
	if _, r = Decide(s, l, 1, nov.UnixNano()); !r.Allowed {
		t.Fatalf("November 1st: %+v", r)
	}
}

// Days across a daylight-saving change last 23 and 25 hours.
func TestCalendarDayAcrossDST(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	l := calLimit(Day, 1, berlin)
	for _, tc := range []struct {
		d    int64
		m    time.Month
		day  int
		want time.Duration
	}{
		{1, time.March, 29, 23 * time.Hour},
		{2, time.October, 25, 25 * time.Hour},
		{3, time.October, 26, 24 * time.Hour},
	} {
		now := at(berlin, 2026, tc.m, tc.day, 12, 0, 0, 0)
		s, r := Decide(State{}, l, 1, now)
		if s.A != at(berlin, 2026, tc.m, tc.day, 0, 0, 0, 0) || time.Duration(s.C) != tc.want {
			t.Errorf("%v %d: window %v for %v, want %v", tc.m, tc.day, time.Unix(0, s.A).In(berlin), time.Duration(s.C), tc.want)
		}
		next := time.Date(2026, tc.m, tc.day+1, 0, 0, 0, 0, berlin).UnixNano()
		if r.ResetAfter != time.Duration(next-now) {
			t.Errorf("%v %d: reset after %v, want %v", tc.m, tc.day, r.ResetAfter, time.Duration(next-now))
		}
	}
}

// A daily quota in UTC (the default zone) resets at midnight.
func TestCalendarDayUTC(t *testing.T) {
	l := calLimit(Day, 2, nil)
	now := at(time.UTC, 2026, 12, 1, 18, 0, 0, 0)
	s, _ := Decide(State{}, l, 2, now)
	_, r := Decide(s, l, 1, now)
	if r.Allowed || r.RetryAfter != 6*time.Hour || r.ResetAfter != 6*time.Hour || r.Remaining != 0 {
		t.Fatalf("over the daily quota at 18:00: %+v, want retry and reset in 6h", r)
	}
	midnight := at(time.UTC, 2026, 12, 2, 0, 0, 0, 0)
	if _, r = Decide(s, l, 1, midnight-1); r.Allowed {
		t.Fatalf("23:59:59.999999999: %+v", r)
	}
	if Full(s, l, midnight-1) || !Full(s, l, midnight) {
		t.Fatal("Full must turn true exactly at midnight")
	}
	if _, r = Decide(s, l, 2, midnight); !r.Allowed {
		t.Fatalf("at midnight: %+v", r)
	}
	if l.IdleAfter() < 24*time.Hour {
		t.Fatalf("IdleAfter %v is shorter than a day", l.IdleAfter())
	}
}

// Weeks start on Monday; years on January 1st.
func TestCalendarWeekAndYear(t *testing.T) {
	ny := zone(t, "America/New_York")
	// Wednesday 2026-12-02.
	s, _ := Decide(State{}, calLimit(Week, 5, ny), 1, at(ny, 2026, 12, 2, 9, 0, 0, 0))
	if s.A != at(ny, 2026, 11, 30, 0, 0, 0, 0) || time.Duration(s.C) != 7*24*time.Hour {
		t.Errorf("week: %v +%v", time.Unix(0, s.A).In(ny), time.Duration(s.C))
	}
	// A Monday at midnight starts its own week.
	s, _ = Decide(State{}, calLimit(Week, 5, ny), 1, at(ny, 2026, 11, 30, 0, 0, 0, 0))
	if s.A != at(ny, 2026, 11, 30, 0, 0, 0, 0) {
		t.Errorf("week from Monday midnight: %v", time.Unix(0, s.A).In(ny))
	}
	s, r := Decide(State{}, calLimit(Year, 5, ny), 1, at(ny, 2026, 12, 31, 23, 0, 0, 0))
	if s.A != at(ny, 2026, 1, 1, 0, 0, 0, 0) || r.ResetAfter != time.Hour {
		t.Errorf("year: %v, reset after %v", time.Unix(0, s.A).In(ny), r.ResetAfter)
	}
}

// A calendar state read on a clock d ahead of its writer's (Later) keeps
// its count until the instant its writer's window ends; refunds keep the
// window.
func TestCalendarLaterAndRefund(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	l := calLimit(Day, 2, berlin)
	now := at(berlin, 2026, 3, 28, 23, 0, 0, 0)
	s, _ := Decide(State{}, l, 2, now)
	const d = int64(3 * time.Second)
	moved := Later(s, d)
	end := at(berlin, 2026, 3, 29, 0, 0, 0, 0)
	if _, r := Decide(moved, l, 1, end+d-1); r.Allowed || r.RetryAfter != 1 {
		t.Fatalf("moved state just before its writer's end: %+v", r)
	}
	if _, r := Decide(moved, l, 1, end+d); !r.Allowed {
		t.Fatalf("moved state at its writer's end: %+v", r)
	}
	// The next window is the reader's calendar day, 23 hours long.
	next, _ := Decide(moved, l, 1, end+d)
	if next.A != end || time.Duration(next.C) != 23*time.Hour {
		t.Fatalf("next window %v +%v", time.Unix(0, next.A).In(berlin), time.Duration(next.C))
	}
	back := Refund(s, l, 1, now+1)
	if back.A != s.A || back.C != s.C || back.B != 1 {
		t.Fatalf("refund: %+v from %+v", back, s)
	}
}

// A state written under a Period window (no length in C) and read under a
// calendar limit (a rule edit) keeps its count to the end of the calendar
// window holding its start, never longer; the other way, a calendar state
// read under a Period limit keeps it for one Period.
func TestCalendarRuleEdit(t *testing.T) {
	hourly := Limit{Algorithm: FixedWindow, Rate: 5, Period: time.Hour}
	now := at(time.UTC, 2026, 12, 1, 22, 30, 0, 0)
	s, _ := Decide(State{}, hourly, 5, now)
	daily := calLimit(Day, 5, nil)
	midnight := at(time.UTC, 2026, 12, 2, 0, 0, 0, 0)
	if _, r := Decide(s, daily, 1, midnight-1); r.Allowed || r.RetryAfter != 1 {
		t.Fatalf("hour's count under the day: %+v", r)
	}
	if _, r := Decide(s, daily, 1, midnight); !r.Allowed {
		t.Fatalf("next day: %+v", r)
	}
	c, _ := Decide(State{}, daily, 5, now)
	if _, r := Decide(c, hourly, 1, at(time.UTC, 2026, 12, 1, 23, 0, 0, 0)); !r.Allowed {
		t.Fatalf("calendar state under an hourly limit, an hour after its start: %+v", r)
	}
}

// Windows tile the time line in zones with odd changes: no gap, no
// overlap, each holding the instants it is computed for, none longer than
// Calendar.Longest.
func TestCalendarWindowsTile(t *testing.T) {
	zones := []string{"UTC", "Europe/Berlin", "Australia/Lord_Howe", "Antarctica/Troll",
		"America/Sao_Paulo", "Pacific/Apia", "America/Havana", "Asia/Tehran", "Pacific/Kiritimati"}
	for _, name := range zones {
		loc := zone(t, name)
		for _, c := range []Unit{Day, Week, Month, Year} {
			from := at(time.UTC, 1990, 1, 1, 0, 0, 0, 0)
			to := at(time.UTC, 2032, 1, 1, 0, 0, 0, 0)
			start, end := c.window(from, loc)
			for n := 0; start < to && n < 20000; n++ {
				if end <= start || time.Duration(end-start) > c.Longest() {
					t.Fatalf("%s %v: window %v +%v", name, c, time.Unix(0, start).In(loc), time.Duration(end-start))
				}
				for _, probe := range []int64{start, (start + end) / 2, end - 1} {
					if s2, e2 := c.window(probe, loc); s2 != start || e2 != end {
						t.Fatalf("%s %v: %v is in [%v, %v) but gets [%v, %v)", name, c, time.Unix(0, probe).In(loc),
							time.Unix(0, start).In(loc), time.Unix(0, end).In(loc), time.Unix(0, s2).In(loc), time.Unix(0, e2).In(loc))
					}
				}
				s2, e2 := c.window(end, loc)
				if s2 != end {
					t.Fatalf("%s %v: the window after [.., %v) starts at %v", name, c, time.Unix(0, end).In(loc), time.Unix(0, s2).In(loc))
				}
				start, end = s2, e2
			}
		}
	}
}

func TestCalendarParseAndValidate(t *testing.T) {
	for _, name := range []string{"day", "week", "month", "year"} {
		c, err := ParseUnit(name)
		if err != nil || c.String() != name || c.Nominal() <= 0 {
			t.Errorf("ParseUnit(%q) = %v, %v", name, c, err)
		}
	}
	for _, bad := range []string{"Day", "days", "quarter", " month"} {
		if _, err := ParseUnit(bad); !errors.Is(err, ErrUnknownCalendar) {
			t.Errorf("ParseUnit(%q): %v", bad, err)
		}
	}
	if err := calLimit(Month, 10, nil).Validate(DefaultMaxLog); err != nil {
		t.Errorf("a monthly fixed window: %v", err)
	}
	tb := calLimit(Month, 10, nil)
	tb.Algorithm = TokenBucket
	if err := tb.Validate(DefaultMaxLog); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("a calendar token bucket: %v", err)
	}
	unknown := calLimit(Unit(9), 10, nil)
	unknown.Period = time.Hour
	if err := unknown.Validate(DefaultMaxLog); !errors.Is(err, ErrUnknownCalendar) {
		t.Errorf("an unknown calendar: %v", err)
	}
}

// Random steps on a clock that mostly runs forward (and sometimes jumps
// back), over days, weeks and months in a zone with daylight saving: no
// calendar window ever admits more than Rate, remaining stays within
// [0, Rate], and a denial's RetryAfter is exactly the time to the end of
// the window the state holds.
func TestCalendarPropertyNeverOverWindow(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	rng := rand.New(rand.NewPCG(29, 1))
	for _, c := range []Unit{Day, Week, Month} {
		for run := range 40 {
			rate := int64(1 + rng.IntN(20))
			l := calLimit(c, rate, berlin)
			var s State
			now := at(berlin, 2026, time.Month(1+rng.IntN(12)), 1+rng.IntN(28), rng.IntN(24), 0, 0, 0)
			latest := now
			taken := map[int64]int64{} // by window start
			for range 400 {
				switch k := rng.IntN(10); {
				case k < 7:
					now += rng.Int64N(int64(c.Nominal()) / 8)
				case k < 9:
					now += rng.Int64N(int64(time.Hour))
				default:
					now -= rng.Int64N(int64(2 * time.Hour))
				}
				cost := int64(rng.IntN(int(rate) + 1))
				ns, r := Decide(s, l, cost, now)
				if r.Remaining < 0 || r.Remaining > rate {
					t.Fatalf("%v run %d: remaining %d of %d", c, run, r.Remaining, rate)
				}
				if !r.Allowed {
					if want := time.Duration(satAdd(s.A, s.C) - now); r.RetryAfter != want {
						t.Fatalf("%v run %d: retry after %v, want %v to the window's end", c, run, r.RetryAfter, want)
					}
					continue
				}
				if cost > 0 {
					// Count by the calendar window of the latest time seen:
					// a clock gone back stays in the state's window.
					latest = max(latest, now)
					start, _ := c.window(latest, berlin)
					if ns.A != start && ns.A > start {
						t.Fatalf("%v run %d: state window %v after the latest time's %v", c, run, ns.A, start)
					}
					taken[ns.A] += cost
					if taken[ns.A] > rate {
						t.Fatalf("%v run %d: %d admitted in the window from %v, rate %d", c, run, taken[ns.A],
							time.Unix(0, ns.A).In(berlin), rate)
					}
				}
				s = ns
			}
		}
	}
}

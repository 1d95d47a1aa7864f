package rules

import (
	"sync"
	"time"
	// Validate loads a calendar rule's zone, and the Raft FSM runs it on
	// every member, a gateway's rule cache on every gateway: with the
	// database built in, a host without one (a FROM scratch image) reads
	// the same zones instead of refusing the rule set.
	_ "time/tzdata"

	"github.com/weirlimit/weir/bucket"
)

// FeatureCalendar marks the rule fields of calendar windows (calendar,
// timezone) in the field table: members that do not advertise it must not
// store a rule that sets them.
const FeatureCalendar = "calendar"

// DefaultTimezone is the zone of a calendar rule that names none.
const DefaultTimezone = "UTC"

// LongWindow is the shortest period of a rule that gateways never lease:
// tokens leased from such a window (and calendar windows, a day or more)
// come back only when the window ends, so a gateway that dies or refunds
// too late holds a share of the quota for hours or a month.
const LongWindow = time.Hour

// Leasable reports whether gateways may ever hold r's tokens locally, by a
// fixed or an automatic lease: not for a calendar rule nor a period of
// LongWindow or more. Validate refuses a fixed lease on a calendar rule
// and CheckWrite on a long period (rules stored before that refusal stay
// valid); a node and the SDK never lease either way.
func (r *Rule) Leasable() bool {
	return r.Calendar == "" && r.Period.D() < LongWindow
}

// Window is the length reports give for r's window: its period, or a
// calendar rule's nominal unit (bucket.Unit.Nominal: a month is 30
// days there; the windows themselves follow the calendar).
func (r *Rule) Window() time.Duration {
	if c, err := bucket.ParseUnit(r.Calendar); err == nil && c != bucket.NoUnit {
		return c.Nominal()
	}
	return r.Period.D()
}

// LoadZone loads an IANA time zone for a calendar rule ("" is UTC). It
// refuses "Local", which is whatever the machine's zone is. Loaded zones
// are kept (time.LoadLocation reads and parses the database each call), so
// a rule's limit costs no load per check.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == DefaultTimezone {
		return time.UTC, nil
	}
	if name == "Local" {
		return nil, errLocalZone
	}
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	zones.Store(name, loc)
	return loc, nil
}

// zones memoizes LoadZone: immutable zones by name, only names the
// database knows (so it holds at most the database's few hundred).
var zones sync.Map

type zoneError string

func (e zoneError) Error() string { return string(e) }

const errLocalZone = zoneError(`"Local" is the machine's own zone, which differs between nodes`)

// errLongLease is the problem with a fixed lease on a long window.
const errLongLease = "a calendar window, or a period of 1h or longer, is never leased: leased tokens would come back only when the window ends; use lease: off or auto (auto never leases it either)"

// CheckWrite refuses, in rules about to be written, what Validate accepts
// only because earlier versions stored it: a fixed lease on a period of
// LongWindow or more (never leased now; Leasable). The write edge calls
// it beside Merge; the FSM does not, so a log written by an older version
// replays to the same rule set on every member. Problems are named as
// Validate(rs) names them ("rules[0].lease").
func CheckWrite(rs []Rule) error {
	var ps problems
	for i, r := range rs {
		ps.prefix = indexPrefix(i)
		if r.Lease > 0 && !r.Leasable() {
			ps.add("lease", "%d: %s", r.Lease.Fixed(), errLongLease)
		}
	}
	return errOf(ps.list)
}

// checkCalendar appends the problems of r's calendar and timezone; alg is
// r's algorithm, resolved.
func (r Rule) checkCalendar(ps *problems, alg string) {
	if r.Calendar == "" {
		if r.Timezone != "" {
			ps.add("timezone", "applies to calendar windows only (add calendar: day | week | month | year)")
		}
		return
	}
	if c, err := bucket.ParseUnit(r.Calendar); err != nil || c == bucket.NoUnit {
		ps.add("calendar", "%q: want day, week, month or year", r.Calendar)
	}
	if alg != AlgFixedWindow {
		ps.add("calendar", "calendar windows need algorithm: %s, not %s (for a smoother limit on the same requests add a second rule, e.g. 100 per 1m)", AlgFixedWindow, alg)
	}
	if r.Period != 0 {
		ps.add("period", "give period (a Go duration) or calendar (day | week | month | year), not both")
	}
	if _, err := LoadZone(r.Timezone); err != nil {
		ps.add("timezone", "%q: not a time zone (%v); want an IANA name such as Europe/Berlin, America/New_York or UTC", r.Timezone, err)
	}
}

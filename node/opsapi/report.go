package opsapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/httpjson"
	"github.com/weirlimit/weir/node/authz"
	"github.com/weirlimit/weir/node/events"
)

// Report is one batch of a gateway's decisions made without asking the
// owner: answered from a lease or the blocked-until cache (Local), or by
// the rule's fail mode when the owner could not be reached in time.
type Report struct {
	Gateway string        `json:"gateway"`
	Counts  []ReportCount `json:"counts"`
	// Events are sampled gateway-side decisions in the one event shape
	// (events.Event); the node sets their seq, node and gateway.
	Events []events.Event `json:"events,omitempty"`
}

// ReportCount is one rule's decisions since the gateway's last report.
type ReportCount struct {
	Rule         string `json:"rule"`
	LocalAllowed uint64 `json:"local_allowed,omitempty"`
	LocalDenied  uint64 `json:"local_denied,omitempty"`
	FailOpen     uint64 `json:"fail_open,omitempty"`
	FailClosed   uint64 `json:"fail_closed,omitempty"`
}

// Limits on a report.
const (
	MaxReportCounts = 10000
	MaxReportEvents = 1000
	MaxGatewayID    = 128
	// MaxReportRule is the longest rule id a report may name (rules'
	// MaxIDLen).
	MaxReportRule = 128
	// MaxReportKey is the longest event key (limit.MaxKeyLen).
	MaxReportKey = 256
	// MaxReportBytes bounds a report's HTTP body.
	MaxReportBytes = 1 << 20
	// MaxGatewayIDsPerHost: without a gateway credential a report is bound
	// to its caller's address (the SDK sends each report on a connection
	// of its own), which may report as this many gateway ids.
	MaxGatewayIDsPerHost = 64
)

// Bounds of the report intake (docs/security.md, gateway reports).
const (
	// MaxTrackedGateways bounds the gateways one node's intake tracks.
	MaxTrackedGateways = 10000
	// ReportBurst reports at once, then one per ReportEvery, per gateway
	// (a gateway reports every few seconds to the members in turn).
	ReportBurst = 5
	ReportEvery = time.Second
	// GatewayIdle: a gateway with a credential that has not reported for
	// this long may give its place to a new one when the intake is full.
	GatewayIdle = 2 * time.Minute
	// MaxGatewayRate is the most decisions per second of the interval
	// since its last report (at most MaxReportSpan, at least ReportEvery)
	// a gateway's report may count; counts beyond it are cut, fail-open
	// last.
	MaxGatewayRate = 1_000_000
	MaxReportSpan  = time.Minute
	// EventSkew: an event stamped further than this from the node's clock
	// (or not at all) is stamped with the node's time.
	EventSkew = time.Minute
)

// Errors of the report intake.
var (
	// ErrBadReport marks a report that is refused whole.
	ErrBadReport = errors.New("opsapi: bad report")
	// ErrReportRefused marks a well-formed report refused by a bound (a
	// gateway's report rate, the gateways one caller or node may hold).
	ErrReportRefused = errors.New("opsapi: report refused")
)

// Validate checks a report's shape; nothing of a bad report is applied.
func (r *Report) Validate() error {
	switch {
	case r.Gateway == "" || len(r.Gateway) > MaxGatewayID:
		return fmt.Errorf("%w: gateway: want an id of 1 to %d bytes", ErrBadReport, MaxGatewayID)
	case len(r.Counts) > MaxReportCounts:
		return fmt.Errorf("%w: counts: %d, at most %d", ErrBadReport, len(r.Counts), MaxReportCounts)
	case len(r.Events) > MaxReportEvents:
		return fmt.Errorf("%w: events: %d, at most %d", ErrBadReport, len(r.Events), MaxReportEvents)
	}
	for i, c := range r.Counts {
		if c.Rule == "" || len(c.Rule) > MaxReportRule {
			return fmt.Errorf("%w: counts[%d].rule: want an id of 1 to %d bytes", ErrBadReport, i, MaxReportRule)
		}
	}
	for i, e := range r.Events {
		if e.Rule == "" || e.Key == "" || (e.Decision != events.Allowed && e.Decision != events.Denied && e.Decision != events.Error) {
			return fmt.Errorf("%w: events[%d]: want rule, key and a decision of allowed, denied or error", ErrBadReport, i)
		}
		if len(e.Rule) > MaxReportRule || len(e.Key) > MaxReportKey {
			return fmt.Errorf("%w: events[%d]: rule at most %d bytes, key at most %d", ErrBadReport, i, MaxReportRule, MaxReportKey)
		}
	}
	return nil
}

// Intake admits gateway reports: a gateway is the pair (owner, gateway
// id), owner being the caller's credential (authz.GatewayOwner). It
// bounds each gateway's report rate, the ids one owner holds, the
// gateways tracked, the counts a report may carry for the time since the
// gateway's last one, and restamps events far from the node's clock.
//
// When MaxTrackedGateways are tracked, a new gateway takes the place of
// the stalest one bound to a connection (the node has no gateway
// credential: anyone may report), else of the stalest one idle for
// GatewayIdle; else it is refused. So gateways reporting through
// connections cannot lock out gateways with a credential, and a real
// gateway, reporting every few seconds, is never the stalest for long.
// Safe for concurrent use.
type Intake struct {
	mu       sync.Mutex
	gateways map[intakeKey]*intakeEntry
	owners   map[string]int // gateway ids per owner
}

type intakeKey struct{ owner, id string }

type intakeEntry struct {
	conn   bool      // bound to a connection
	last   time.Time // last admitted report (zero: none yet)
	tokens float64   // reports it may send now
	at     time.Time // when tokens was last refilled
}

// NewIntake returns an empty Intake.
func NewIntake() *Intake {
	return &Intake{gateways: map[intakeKey]*intakeEntry{}, owners: map[string]int{}}
}

// Admitted is what Admit changed in a report.
type Admitted struct {
	// Cut is the decisions taken off the report's counts (MaxGatewayRate).
	Cut uint64
	// Restamped is the events given the node's time (EventSkew).
	Restamped int
}

// Admit admits rep (valid) from owner o at now, cutting its counts and
// restamping its events in place, or refuses it with ErrReportRefused.
func (in *Intake) Admit(o authz.GatewayOwner, rep *Report, now time.Time) (Admitted, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	k := intakeKey{owner: o.Name, id: rep.Gateway}
	e := in.gateways[k]
	if e == nil {
		if in.owners[o.Name] >= o.MaxIDs {
			return Admitted{}, fmt.Errorf("%w: this caller (%s) already reports as %d gateway ids, the most one may", ErrReportRefused, o.Name, o.MaxIDs)
		}
		if len(in.gateways) >= MaxTrackedGateways && !in.evict(now) {
			return Admitted{}, fmt.Errorf("%w: this node already tracks %d gateways, none idle for %v", ErrReportRefused, MaxTrackedGateways, GatewayIdle)
		}
		e = &intakeEntry{conn: o.Conn, tokens: ReportBurst, at: now}
		in.gateways[k] = e
		in.owners[o.Name]++
	}
	e.tokens = min(ReportBurst, e.tokens+now.Sub(e.at).Seconds()/ReportEvery.Seconds())
	e.at = now
	if e.tokens < 1 {
		return Admitted{}, fmt.Errorf("%w: gateway %q reports more than once per %v", ErrReportRefused, rep.Gateway, ReportEvery)
	}
	e.tokens--
	span := MaxReportSpan
	if !e.last.IsZero() {
		span = min(max(now.Sub(e.last), ReportEvery), MaxReportSpan)
	}
	e.last = now
	var a Admitted
	a.Cut = cutCounts(rep.Counts, uint64(MaxGatewayRate*span.Seconds()))
	for i := range rep.Events {
		ev := &rep.Events[i]
		if d := ev.Time.Sub(now); ev.Time.IsZero() || d > EventSkew || d < -EventSkew {
			ev.Time = now
			a.Restamped++
		}
	}
	return a, nil
}

// evict drops the stalest gateway bound to a connection, else the
// stalest idle for GatewayIdle; false when there is none.
func (in *Intake) evict(now time.Time) bool {
	var conn, old *intakeKey
	var connAt, oldAt time.Time
	for k, e := range in.gateways {
		if e.conn && (conn == nil || e.at.Before(connAt)) {
			conn, connAt = &k, e.at
		}
		if old == nil || e.at.Before(oldAt) {
			old, oldAt = &k, e.at
		}
	}
	victim := conn
	if victim == nil && old != nil && now.Sub(oldAt) >= GatewayIdle {
		victim = old
	}
	if victim == nil {
		return false
	}
	delete(in.gateways, *victim)
	if in.owners[victim.owner]--; in.owners[victim.owner] <= 0 {
		delete(in.owners, victim.owner)
	}
	return true
}

// Len is the gateways tracked.
func (in *Intake) Len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.gateways)
}

// cutCounts cuts counts to at most allowance decisions in all, taking the
// fail-open counts off first (they raise an alert), and reports how many
// it took off.
func cutCounts(counts []ReportCount, allowance uint64) uint64 {
	var total uint64
	for _, c := range counts {
		for _, v := range [4]uint64{c.LocalAllowed, c.LocalDenied, c.FailClosed, c.FailOpen} {
			total = satAdd(total, v)
		}
	}
	if total <= allowance {
		return 0
	}
	left := allowance
	for _, field := range []func(*ReportCount) *uint64{
		func(c *ReportCount) *uint64 { return &c.LocalAllowed },
		func(c *ReportCount) *uint64 { return &c.LocalDenied },
		func(c *ReportCount) *uint64 { return &c.FailClosed },
		func(c *ReportCount) *uint64 { return &c.FailOpen },
	} {
		for i := range counts {
			p := field(&counts[i])
			*p = min(*p, left)
			left -= *p
		}
	}
	return total - allowance
}

func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// reportOwner is the owner of a report from o: o, or when o is bound to a
// connection, the connection's host (MaxGatewayIDsPerHost).
func reportOwner(o authz.GatewayOwner) authz.GatewayOwner {
	if !o.Conn {
		return o
	}
	addr := strings.TrimPrefix(o.Name, "conn:")
	if h, _, err := net.SplitHostPort(addr); err == nil {
		addr = h
	}
	return authz.GatewayOwner{Name: "host:" + addr, MaxIDs: MaxGatewayIDsPerHost, Conn: true}
}

// takeReport validates, admits and applies one report from o.
func (s *Server) takeReport(o authz.GatewayOwner, rep *Report) error {
	if err := rep.Validate(); err != nil {
		return err
	}
	o = reportOwner(o)
	a, err := s.intake.Admit(o, rep, s.cfg.Now())
	if err != nil {
		return err
	}
	if a.Cut > 0 || a.Restamped > 0 {
		s.cfg.Logger.Warn("gateway report cut to its bounds", "gateway", rep.Gateway, "owner", o.Name,
			"decisions_cut", a.Cut, "events_restamped", a.Restamped)
	}
	return s.src.Report(*rep)
}

// POST /v1/gateways/report: a JSON body (a cross-site form cannot send
// one without a preflight) of at most MaxReportBytes, from a caller with
// the gateway role (authz).
func (s *Server) postReport(w http.ResponseWriter, r *http.Request) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		httpjson.Write(w, http.StatusUnsupportedMediaType, httpjson.ErrorBody{Error: "a report's Content-Type must be application/json", Code: "unsupported_media_type"})
		return
	}
	o, err := authz.GatewayOwnerFrom(r.Context(), r.RemoteAddr)
	if err != nil {
		code, name := http.StatusForbidden, "forbidden"
		if status.Code(err) == codes.Unauthenticated {
			code, name = http.StatusUnauthorized, "unauthorized"
		}
		httpjson.Write(w, code, httpjson.ErrorBody{Error: status.Convert(err).Message(), Code: name})
		return
	}
	var rep Report
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxReportBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			httpjson.Write(w, http.StatusRequestEntityTooLarge, httpjson.ErrorBody{Error: fmt.Sprintf("report body is over %d bytes", MaxReportBytes), Code: "too_large"})
			return
		}
		badRequest(w, "malformed report: %v", err)
		return
	}
	switch err := s.takeReport(o, &rep); {
	case errors.Is(err, ErrReportRefused):
		httpjson.Write(w, http.StatusTooManyRequests, httpjson.ErrorBody{Error: err.Error(), Code: "resource_exhausted"})
		return
	case err != nil:
		badRequest(w, "%v", err)
		return
	}
	httpjson.Write(w, http.StatusOK, struct {
		OK bool `json:"ok"`
	}{true})
}

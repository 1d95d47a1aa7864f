package rls

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weirlimit/weir/internal/rulecache"
	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/limit/headers"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// Backend is what the service needs of the node: Check as node/api's
// Backend has it (items valid, one result per item), and the local rule
// set.
type Backend interface {
	Check(ctx context.Context, items []limit.Item, out []limit.Result) error
	Rules() *rules.Set
}

// Config configures a Server.
type Config struct {
	// HeaderStyle picks the fields of response_headers_to_add (empty:
	// headers.Default).
	HeaderStyle headers.Style
	// AllOrNothing makes the descriptors of one request pass or fail
	// together (see doc.go). DefaultConfig sets it.
	AllOrNothing bool
	// Registry receives the decision counter; nil means none.
	Registry prometheus.Registerer
	// ErrorMapper maps a Backend error to a gRPC status error (node/api's
	// GRPCError); nil uses codes.Unavailable for every error.
	ErrorMapper func(error) error
	// Trust is what the service believes of negative hits and limit
	// overrides (zero: neither; see Trust).
	Trust Trust
}

// DefaultConfig is all-or-nothing with the default header style.
func DefaultConfig() Config { return Config{AllOrNothing: true, HeaderStyle: headers.Default} }

// Server implements envoy.service.ratelimit.v3.RateLimitService.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	cfg       Config
	b         Backend
	decisions *prometheus.CounterVec
	// ignored counts what Trust took out, by kind (ignoredKinds order).
	ignored [2]prometheus.Counter

	matcher *rulecache.Cache[*compiled]
}

type compiled struct {
	m *rules.DescriptorMatcher
	// counters holds each descriptor rule's decision counters, by outcome
	// (outcomes order), so the hot path does not hash labels.
	counters map[string]*[4]prometheus.Counter
}

// outcomes label weir_rls_decisions_total.
var outcomes = [4]string{"ok", "over_limit", "shadow_over_limit", "error"}

// ignoredKinds label weir_rls_ignored_total.
var ignoredKinds = [2]string{"negative_hits", "override"}

var _ rlsv3.RateLimitServiceServer = (*Server)(nil)

// New returns a Server over b.
func New(cfg Config, b Backend) (*Server, error) {
	if b == nil {
		return nil, errors.New("rls: nil Backend")
	}
	st, err := headers.Parse(string(cfg.HeaderStyle))
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}
	cfg.HeaderStyle = st
	s := &Server{cfg: cfg, b: b}
	s.matcher = rulecache.New(s.compile)
	s.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "weir_rls_decisions_total",
		Help: "Rate limit service rule decisions by rule and outcome (ok, over_limit, shadow_over_limit, error).",
	}, []string{"rule", "outcome"})
	ignored := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "weir_rls_ignored_total",
		Help: "Rate limit service descriptors whose negative hits or limit override were ignored (not trusted: --rls-trust), by kind (negative_hits, override).",
	}, []string{"kind"})
	for i, k := range ignoredKinds {
		s.ignored[i] = ignored.WithLabelValues(k)
	}
	if cfg.Registry != nil {
		for _, c := range []prometheus.Collector{s.decisions, ignored} {
			if err := cfg.Registry.Register(c); err != nil {
				return nil, fmt.Errorf("rls: metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Register registers the service on g, with the hand-written codec of
// wire.go for its messages.
func (s *Server) Register(g *grpc.Server) { g.RegisterService(&serviceDesc, s) }

// descriptors returns the matcher for the current rule set, compiled once
// per version.
func (s *Server) descriptors() *compiled { return s.matcher.Get(s.b.Rules()) }

// compile builds the descriptor matcher and its rules' counters for set.
func (s *Server) compile(set *rules.Set) *compiled {
	var rs []rules.Rule
	if set != nil {
		rs = set.Rules
	}
	m, err := rules.CompileDescriptors(rs)
	if err != nil { // the FSM holds valid sets only
		rs = nil
		m, _ = rules.CompileDescriptors(nil)
	}
	c := &compiled{m: m, counters: map[string]*[4]prometheus.Counter{}}
	for _, r := range rs {
		if r.Match.Domain == "" {
			continue
		}
		var cs [4]prometheus.Counter
		for i, o := range outcomes {
			cs[i] = s.decisions.WithLabelValues(r.ID, o)
		}
		c.counters[r.ID] = &cs
	}
	return c
}

// ShouldRateLimit decides a request (see doc.go).
func (s *Server) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	r := fromProto(in)
	resp, err := s.Decide(ctx, &r)
	if err != nil {
		return nil, s.statusOf(err)
	}
	return toProto(resp), nil
}

// statusOf is the gRPC status error of a Decide error.
func (s *Server) statusOf(err error) error {
	if errors.Is(err, limit.ErrInvalid) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if s.cfg.ErrorMapper != nil {
		return s.cfg.ErrorMapper(err)
	}
	return status.Error(codes.Unavailable, err.Error())
}

// Decide is ShouldRateLimit in domain terms.
func (s *Server) Decide(ctx context.Context, r *Request) (Response, error) {
	if err := validate(r); err != nil {
		return Response{}, err
	}
	ctx = tracing.FromGRPC(ctx, metadata.ValueFromIncomingContext) // a gRPC caller's trace, if it sent one
	r, neg, over := distrust(r, s.cfg.Trust)
	s.ignored[0].Add(float64(neg))
	s.ignored[1].Add(float64(over))
	c := s.descriptors()
	items, where, unlimited := plan(c.m, r, s.cfg.AllOrNothing)
	for j, w := range where {
		if o := items[j].Override; o != nil {
			lim := w.rule.Limit()
			lim.Rate, lim.Period, lim.Burst = o.Rate, o.Period, o.Rate
			if err := lim.Validate(rules.MaxLogLimit); err != nil {
				return Response{}, invalid("descriptors[%d].limit: %v for rule %s (%s)", w.desc, err, w.rule.ID, w.rule.Algorithm)
			}
		}
	}
	res := make([]limit.Result, len(items))
	if len(items) > 0 {
		if err := s.b.Check(ctx, items, res); err != nil {
			return Response{}, err
		}
	}
	out := answer(r, items, where, unlimited, res, s.cfg.HeaderStyle)
	for j, w := range where {
		if cs := c.counters[w.rule.ID]; cs != nil {
			cs[outcome(w.rule, &res[j])].Inc()
		}
	}
	return out, nil
}

// outcome is the index in outcomes of a rule's decision.
func outcome(r *rules.Rule, x *limit.Result) int {
	switch {
	case x.Code != limit.CodeNone:
		return 3
	case x.Allowed || x.Voided:
		return 0
	case r.Shadow:
		return 2
	}
	return 1
}

// fromProto reads the wire request.
func fromProto(in *rlsv3.RateLimitRequest) Request {
	r := Request{Domain: in.GetDomain(), Hits: uint64(in.GetHitsAddend()), Descriptors: make([]Descriptor, len(in.GetDescriptors()))}
	for i, d := range in.GetDescriptors() {
		out := &r.Descriptors[i]
		out.Entries = make([]rules.Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			out.Entries[j] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		if h := d.GetHitsAddend(); h != nil {
			out.Hits, out.HasHits = h.GetValue(), true
		}
		out.Negative = d.GetIsNegativeHits()
		if l := d.GetLimit(); l != nil {
			out.Override = &Override{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: units[l.GetUnit()], Multiplier: 1}
			if m := l.GetUnitMultiplier(); m != nil {
				out.Override.Multiplier = m.GetValue()
			}
		}
	}
	return r
}

// units are the override units Weir takes (not month or year: no fixed
// length).
var units = map[typev3.RateLimitUnit]time.Duration{
	typev3.RateLimitUnit_SECOND: time.Second, typev3.RateLimitUnit_MINUTE: time.Minute,
	typev3.RateLimitUnit_HOUR: time.Hour, typev3.RateLimitUnit_DAY: 24 * time.Hour,
}

// toProto writes the wire response.
func toProto(r Response) *rlsv3.RateLimitResponse {
	out := &rlsv3.RateLimitResponse{OverallCode: code(r.Overall), Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(r.Statuses))}
	for i, s := range r.Statuses {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: code(s.Code)}
		if s.Rule != "" {
			unit, mult := unitOf(s.Window)
			st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: s.Rule, RequestsPerUnit: clampU32(s.Limit), Unit: unit}
			if mult != 1 {
				st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(mult)
			}
			st.LimitRemaining = clampU32(s.Remaining)
			st.DurationUntilReset = durationpb.New(max(s.Reset, 0))
		} else if s.Unlimited { // as envoyproxy/ratelimit answers an unlimited descriptor
			st.LimitRemaining = 1<<32 - 1
		}
		out.Statuses[i] = st
	}
	for _, h := range r.Headers {
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValue{Key: h.Name, Value: h.Value})
	}
	return out
}

func code(c Code) rlsv3.RateLimitResponse_Code {
	if c == OverLimit {
		return rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return rlsv3.RateLimitResponse_OK
}

func clampU32(v int64) uint32 {
	switch {
	case v < 0:
		return 0
	case v > 1<<32-1:
		return 1<<32 - 1
	}
	return uint32(v)
}

// unitOf writes a window as Envoy's largest whole unit and a multiplier.
func unitOf(w time.Duration) (rlsv3.RateLimitResponse_RateLimit_Unit, uint32) {
	for _, u := range []struct {
		d time.Duration
		u rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
		{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
		{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
	} {
		if w >= u.d && w%u.d == 0 && w/u.d <= 1<<32-1 {
			return u.u, uint32(w / u.d)
		}
	}
	return rlsv3.RateLimitResponse_RateLimit_SECOND, uint32(max((w+time.Second-1)/time.Second, 1))
}

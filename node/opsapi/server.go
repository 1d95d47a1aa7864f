package opsapi

import (
	"context"
	"crypto/tls"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirlimit/weir/internal/httpjson"
	"github.com/weirlimit/weir/node/events"
)

// Source is what the edge needs from the node.
type Source interface {
	// Self is this node's id.
	Self() string
	// Events is the node's sampled events buffer.
	Events() *events.Buffer
	// HotKeys is up to top hottest keys per rule ("" for every rule).
	HotKeys(rule string, top int) []HotKey
	// Rates is the per-rule rate series of this node.
	Rates() []RuleRate
	// Gateways is what gateways reported to this node.
	Gateways() []Gateway
	// Cluster is the cluster and the rule set as this node sees them.
	Cluster() (Cluster, Rules)
	// Peers maps the other live members' ids to their HTTP addresses.
	Peers() map[string]string
	// Report takes one gateway report (validated here).
	Report(Report) error
	// Permits is the concurrency permits held on this node's counters,
	// by rule.
	Permits(context.Context) ([]RulePermits, error)
}

// Defaults of Config.
const (
	DefaultPeerTimeout = time.Second
	DefaultFollowPoll  = time.Second
	DefaultEventsLimit = 100
	// DefaultMaxFollowers bounds the events followers (HTTP and gRPC) one
	// node serves at once.
	DefaultMaxFollowers = 64
	// maxPeerAnswer is the largest answer read from another member: far
	// above what a bounded part holds (events.MaxKeyLen, PeerPage), so an
	// answer over it is an error, never a cut one.
	maxPeerAnswer = 8 << 20
)

// Config configures a Server.
type Config struct {
	// Ctx ends following handlers when canceled (the node's lifetime).
	Ctx         context.Context
	Logger      *slog.Logger
	PeerTimeout time.Duration
	FollowPoll  time.Duration
	// Now is the clock of snapshots; nil is time.Now.
	Now func() time.Time
	// MaxFollowers bounds the events followers served at once
	// (0: DefaultMaxFollowers); one more is refused with 429.
	MaxFollowers int
	// PeerTLS, when set, is the TLS client configuration (this node's
	// certificate) of reading other members' parts, over https.
	PeerTLS *tls.Config
	// PeerAuth, when set, adds this node's credential to a read of
	// another member's part (without TLS).
	PeerAuth func(*http.Request)
}

// Server serves the operators' HTTP endpoints and the gRPC Ops service.
type Server struct {
	cfg  Config
	src  Source
	http *http.Client
	// intake admits gateway reports (report.go).
	intake    *Intake
	scheme    string // of other members' HTTP APIs
	feed      *feed
	followers atomic.Int64 // events followers being served
}

// New returns a Server over src.
func New(cfg Config, src Source) *Server {
	if cfg.Ctx == nil {
		cfg.Ctx = context.Background()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PeerTimeout <= 0 {
		cfg.PeerTimeout = DefaultPeerTimeout
	}
	if cfg.FollowPoll <= 0 {
		cfg.FollowPoll = DefaultFollowPoll
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxFollowers <= 0 {
		cfg.MaxFollowers = DefaultMaxFollowers
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // members are reached directly
	s := &Server{cfg: cfg, src: src, http: &http.Client{Timeout: cfg.PeerTimeout, Transport: tr}, scheme: "http", intake: NewIntake()}
	if cfg.PeerTLS != nil {
		tr.TLSClientConfig = cfg.PeerTLS
		s.scheme = "https"
	}
	s.feed = &feed{s: s}
	return s
}

//go:embed ui
var uiFiles embed.FS

// Register adds the operators' routes to mux.
func (s *Server) Register(mux *http.ServeMux) {
	ui, _ := fs.Sub(uiFiles, "ui")
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(ui)))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.HandleFunc("GET /v1/events", s.getEvents)
	mux.HandleFunc("GET /v1/hotkeys", s.getHotKeys)
	mux.HandleFunc("GET /v1/ops/snapshot", s.getSnapshot)
	mux.HandleFunc("POST /v1/gateways/report", s.postReport)
}

// Close waits for the events feed (the Server's context must be done) and
// releases idle peer connections.
func (s *Server) Close() {
	s.feed.wg.Wait()
	s.http.CloseIdleConnections()
}

// follow counts a follower in, or reports false when MaxFollowers are
// served already; unfollow counts it out.
func (s *Server) follow() bool {
	if s.followers.Add(1) > int64(s.cfg.MaxFollowers) {
		s.followers.Add(-1)
		return false
	}
	return true
}

func (s *Server) unfollow() { s.followers.Add(-1) }

func (s *Server) tooManyFollowers() string {
	return fmt.Sprintf("this node already streams events to %d followers, the most it serves at once: retry later, or read without follow", s.cfg.MaxFollowers)
}

// maxErrorText bounds an error sentence: a decoder's message may quote
// the input (an unknown field's name), as long as the body.
const maxErrorText = 2 << 10

func badRequest(w http.ResponseWriter, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if len(msg) > maxErrorText {
		msg = strings.ToValidUTF8(msg[:maxErrorText], "") + "… (cut)"
	}
	httpjson.Write(w, http.StatusBadRequest, httpjson.ErrorBody{Error: msg, Code: "invalid_argument"})
}

// errBadQuery marks a query the caller got wrong.
var errBadQuery = errors.New("opsapi: bad query")

type eventsQuery struct {
	filter events.Filter
	limit  int
	first  int // > 0: a page, the oldest first events after after
	after  uint64
	local  bool
	follow bool
}

func readScope(q url.Values) (local bool, err error) {
	switch q.Get("scope") {
	case "", "cluster":
		return false, nil
	case "local":
		return true, nil
	}
	return false, fmt.Errorf("%w: scope=%q: want cluster (the default) or local", errBadQuery, q.Get("scope"))
}

func readEventsQuery(r *http.Request) (eventsQuery, error) {
	q := r.URL.Query()
	eq := eventsQuery{filter: events.Filter{Rule: q.Get("rule"), Key: q.Get("key"), Decision: q.Get("decision")}, limit: DefaultEventsLimit}
	if !events.ValidDecision(eq.filter.Decision) {
		return eq, fmt.Errorf("%w: decision=%q: want allowed, denied or error", errBadQuery, eq.filter.Decision)
	}
	var err error
	if v := q.Get("limit"); v != "" {
		if eq.limit, err = strconv.Atoi(v); err != nil || eq.limit < 0 {
			return eq, fmt.Errorf("%w: limit=%q: want a whole number >= 0 (0: all held)", errBadQuery, v)
		}
	}
	if v := q.Get("first"); v != "" {
		if eq.first, err = strconv.Atoi(v); err != nil || eq.first <= 0 || eq.first > PeerPage {
			return eq, fmt.Errorf("%w: first=%q: want a whole number from 1 to %d", errBadQuery, v, PeerPage)
		}
	}
	if v := q.Get("after"); v != "" {
		if eq.after, err = strconv.ParseUint(v, 10, 64); err != nil {
			return eq, fmt.Errorf("%w: after=%q: want an event seq", errBadQuery, v)
		}
	}
	if eq.local, err = readScope(q); err != nil {
		return eq, err
	}
	if v := q.Get("follow"); v != "" {
		if eq.follow, err = strconv.ParseBool(v); err != nil {
			return eq, fmt.Errorf("%w: follow=%q: want true or false", errBadQuery, v)
		}
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		eq.follow = true
	}
	if (eq.after > 0 || eq.first > 0) && !eq.local {
		return eq, fmt.Errorf("%w: after and first page one node's buffer: use them with scope=local", errBadQuery)
	}
	if eq.first > 0 && eq.follow {
		return eq, fmt.Errorf("%w: first pages a read: not with follow", errBadQuery)
	}
	return eq, nil
}

// GET /v1/events[?rule=&key=&decision=&limit=&scope=&after=&follow=]
func (s *Server) getEvents(w http.ResponseWriter, r *http.Request) {
	eq, err := readEventsQuery(r)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	if eq.follow {
		if !s.follow() {
			w.Header().Set("Retry-After", "10")
			httpjson.Write(w, http.StatusTooManyRequests, httpjson.ErrorBody{Error: s.tooManyFollowers(), Code: "resource_exhausted"})
			return
		}
		defer s.unfollow()
		s.followEvents(w, r, eq)
		return
	}
	out := struct {
		Events   []events.Event `json:"events"`
		Next     uint64         `json:"next"`
		More     bool           `json:"more,omitempty"`
		Answered []string       `json:"answered"`
		Failed   []string       `json:"failed,omitempty"`
	}{Answered: []string{s.src.Self()}}
	if eq.first > 0 {
		out.Events, out.Next, out.More = s.src.Events().Page(eq.after, eq.filter, eq.first)
	} else {
		out.Events, out.Next, _ = s.src.Events().Since(eq.after, eq.filter, eq.limit)
	}
	if !eq.local {
		q := r.URL.Query()
		q.Set("scope", "local")
		q.Del("after")
		s.fanOut(r.Context(), "/v1/events?"+q.Encode(), func(id string, body []byte) error {
			var part struct {
				Events []events.Event `json:"events"`
			}
			if err := json.Unmarshal(body, &part); err != nil {
				return err
			}
			out.Events = append(out.Events, part.Events...)
			return nil
		}, &out.Answered, &out.Failed)
		sortEvents(out.Events)
		if eq.limit > 0 && len(out.Events) > eq.limit {
			out.Events = out.Events[len(out.Events)-eq.limit:]
		}
		out.Next = 0 // seqs are per node
	}
	if out.Events == nil {
		out.Events = []events.Event{}
	}
	httpjson.Write(w, http.StatusOK, out)
}

func sortEvents(evs []events.Event) {
	slices.SortStableFunc(evs, func(a, b events.Event) int { return a.Time.Compare(b.Time) })
}

// followEvents streams events as server-sent events: first the buffered
// ones (up to limit), then new ones; with cluster scope, other members'
// events come from the feed all followers share.
func (s *Server) followEvents(w http.ResponseWriter, r *http.Request, eq eventsQuery) {
	fl, ok := w.(http.Flusher)
	if !ok {
		httpjson.Write(w, http.StatusInternalServerError, httpjson.ErrorBody{Error: "streaming is not supported on this connection", Code: "internal"})
		return
	}
	ctx := r.Context()
	buf := s.src.Events()
	backlog, next, wake := buf.Since(eq.after, eq.filter, eq.limit)
	var (
		mirror *events.Buffer
		mnext  uint64
		mwake  <-chan struct{} // nil with local scope: never ready
	)
	if !eq.local {
		fr := s.feed.join()
		defer s.feed.leave()
		select {
		case <-fr.ready:
		case <-ctx.Done():
			return
		case <-s.cfg.Ctx.Done():
			return
		}
		mirror = fr.mirror
		var peers []events.Event
		peers, mnext, mwake = mirror.Since(0, eq.filter, eq.limit)
		backlog = append(backlog, peers...)
		sortEvents(backlog)
		if eq.limit > 0 && len(backlog) > eq.limit {
			backlog = backlog[len(backlog)-eq.limit:]
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(evs []events.Event) bool {
		for i := range evs {
			b, _ := json.Marshal(&evs[i])
			if _, err := fmt.Fprintf(w, "event: limit\ndata: %s\n\n", b); err != nil {
				return false
			}
		}
		fl.Flush()
		return true
	}
	if !send(backlog) {
		return
	}
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		var evs []events.Event
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.Ctx.Done():
			return
		case <-keep.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
			continue
		case <-mwake:
			evs, mnext, mwake = mirror.Since(mnext, eq.filter, 0)
		case <-wake:
			if buf.Closed() {
				return
			}
			evs, next, wake = buf.Since(next, eq.filter, 0)
		}
		if !send(evs) {
			return
		}
	}
}

// get fetches path from a member's HTTP API.
func (s *Server) get(ctx context.Context, addr, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PeerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.scheme+"://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	if s.cfg.PeerAuth != nil {
		s.cfg.PeerAuth(req)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", path, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerAnswer+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxPeerAnswer {
		return nil, fmt.Errorf("%s: answer over %d bytes", path, maxPeerAnswer)
	}
	return b, nil
}

// fanOut GETs path from every other live member concurrently and hands
// each answer to merge (called one at a time), noting who answered.
func (s *Server) fanOut(ctx context.Context, path string, merge func(id string, body []byte) error, answered, failed *[]string) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for id, addr := range s.src.Peers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, err := s.get(ctx, addr, path)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				err = merge(id, body)
			}
			if err != nil {
				s.cfg.Logger.Debug("ops fan-out", "member", id, "err", err)
				*failed = append(*failed, id)
				return
			}
			*answered = append(*answered, id)
		}()
	}
	wg.Wait()
	slices.Sort(*answered)
	slices.Sort(*failed)
}

// GET /v1/hotkeys[?rule=R][&top=N][&scope=local]
func (s *Server) getHotKeys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	top := 10
	if v := q.Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 1000 {
			badRequest(w, "top=%q: want a whole number from 1 to 1000", v)
			return
		}
		top = n
	}
	local, err := readScope(q)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	rule := q.Get("rule")
	out := struct {
		Keys     []HotKey `json:"keys"`
		Answered []string `json:"answered"`
		Failed   []string `json:"failed,omitempty"`
	}{Keys: s.src.HotKeys(rule, 0), Answered: []string{s.src.Self()}}
	if !local {
		q.Set("scope", "local")
		q.Set("top", "1000")
		s.fanOut(r.Context(), "/v1/hotkeys?"+q.Encode(), func(_ string, body []byte) error {
			var part struct {
				Keys []HotKey `json:"keys"`
			}
			if err := json.Unmarshal(body, &part); err != nil {
				return err
			}
			out.Keys = append(out.Keys, part.Keys...)
			return nil
		}, &out.Answered, &out.Failed)
	}
	out.Keys = MergeHotKeys(out.Keys, top)
	httpjson.Write(w, http.StatusOK, out)
}

// MergeHotKeys sums the rates of the same (rule, key) and keeps the top
// per rule, rules in order, hottest first.
func MergeHotKeys(in []HotKey, top int) []HotKey {
	type rk struct{ rule, key string }
	sum := map[rk]HotKey{}
	for _, k := range in {
		v := sum[rk{k.Rule, k.Key}]
		v.Rule, v.Key = k.Rule, k.Key
		v.Rate += k.Rate
		v.ErrRate += k.ErrRate
		sum[rk{k.Rule, k.Key}] = v
	}
	out := make([]HotKey, 0, len(sum))
	for _, v := range sum {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b HotKey) int {
		if c := strings.Compare(a.Rule, b.Rule); c != 0 {
			return c
		}
		switch {
		case a.Rate > b.Rate:
			return -1
		case a.Rate < b.Rate:
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	if top <= 0 {
		return out
	}
	kept := out[:0]
	n, rule := 0, ""
	for _, k := range out {
		if k.Rule != rule {
			rule, n = k.Rule, 0
		}
		if n < top {
			kept = append(kept, k)
		}
		n++
	}
	return kept
}

// GET /v1/ops/snapshot[?scope=local]
func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	local, err := readScope(r.URL.Query())
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	snap := Snapshot{
		Node: s.src.Self(), Time: s.cfg.Now().UTC(), Scope: "cluster",
		Rates: s.src.Rates(), HotKeys: s.src.HotKeys("", 0), Gateways: s.src.Gateways(),
		Answered: []string{s.src.Self()},
	}
	snap.Events, _, _ = s.src.Events().Since(0, events.Filter{}, 50)
	if snap.Permits, err = s.src.Permits(r.Context()); err != nil {
		httpjson.WriteError(w, http.StatusServiceUnavailable, "unavailable", "counting the permits in use: "+err.Error())
		return
	}
	if local {
		snap.Scope = "local"
	} else {
		c, rs := s.src.Cluster()
		snap.Cluster, snap.Rules = &c, &rs
		s.fanOut(r.Context(), "/v1/ops/snapshot?scope=local", func(_ string, body []byte) error {
			var part Snapshot
			if err := json.Unmarshal(body, &part); err != nil {
				return err
			}
			snap.Rates = append(snap.Rates, part.Rates...)
			snap.HotKeys = append(snap.HotKeys, part.HotKeys...)
			snap.Events = append(snap.Events, part.Events...)
			snap.Gateways = append(snap.Gateways, part.Gateways...)
			snap.Permits = append(snap.Permits, part.Permits...)
			return nil
		}, &snap.Answered, &snap.Failed)
		snap.Rates = MergeRates(snap.Rates)
		snap.Gateways = MergeGateways(snap.Gateways)
		snap.Permits = MergePermits(snap.Permits)
		sortEvents(snap.Events)
		if len(snap.Events) > 50 {
			snap.Events = snap.Events[len(snap.Events)-50:]
		}
	}
	snap.HotKeys = MergeHotKeys(snap.HotKeys, 5)
	if snap.Events == nil {
		snap.Events = []events.Event{}
	}
	httpjson.Write(w, http.StatusOK, snap)
}

// MergeRates sums the points of the same rule and time across nodes.
func MergeRates(in []RuleRate) []RuleRate {
	by := map[string]map[int64]RatePoint{}
	for _, rr := range in {
		m := by[rr.Rule]
		if m == nil {
			m = map[int64]RatePoint{}
			by[rr.Rule] = m
		}
		for _, p := range rr.Points {
			v := m[p.T]
			v.T = p.T
			v.Allowed += p.Allowed
			v.Denied += p.Denied
			v.Error += p.Error
			m[p.T] = v
		}
	}
	out := make([]RuleRate, 0, len(by))
	for rule, m := range by {
		rr := RuleRate{Rule: rule, Points: make([]RatePoint, 0, len(m))}
		for _, p := range m {
			rr.Points = append(rr.Points, p)
		}
		slices.SortFunc(rr.Points, func(a, b RatePoint) int { return int(a.T - b.T) })
		out = append(out, rr)
	}
	slices.SortFunc(out, func(a, b RuleRate) int { return strings.Compare(a.Rule, b.Rule) })
	return out
}

// MergeGateways sums one gateway's reports to several nodes.
func MergeGateways(in []Gateway) []Gateway {
	by := map[string]*Gateway{}
	for _, g := range in {
		v := by[g.ID]
		if v == nil {
			v = &Gateway{ID: g.ID}
			by[g.ID] = v
		}
		v.Nodes = append(v.Nodes, g.Nodes...)
		if g.LastReport.After(v.LastReport) {
			v.LastReport = g.LastReport
		}
		v.Local += g.Local
		v.FailOpen += g.FailOpen
		v.FailClosed += g.FailClosed
	}
	out := make([]Gateway, 0, len(by))
	for _, v := range by {
		slices.Sort(v.Nodes)
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b Gateway) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// MergePermits sums the permits of the same rule, by rule, leaving out
// rules that hold none.
func MergePermits(in []RulePermits) []RulePermits {
	by := map[string]int64{}
	for _, p := range in {
		by[p.Rule] += p.InUse
	}
	out := make([]RulePermits, 0, len(by))
	for rule, n := range by {
		if n > 0 {
			out = append(out, RulePermits{Rule: rule, InUse: n})
		}
	}
	slices.SortFunc(out, func(a, b RulePermits) int { return strings.Compare(a.Rule, b.Rule) })
	return out
}

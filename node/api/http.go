package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/rulesraft/rules"
	"github.com/weirlimit/weir/rulesraft/rules/rulespb"
)

// AuthorHeader names the person or tool making an HTTP write (kept in the
// rules history); without it the history records the remote address.
const AuthorHeader = "X-Weir-Author"

// handlerFunc is an HTTP handler whose error becomes the JSON error body.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h handlerFunc) {
		mux.Handle(pattern, s.instrument(pattern, h))
	}
	handle("GET /v1/rules", s.getRules)
	handle("GET /v1/rules/history", s.getHistory)
	handle("GET /v1/rules/{id}", s.getRule)
	handle("PUT /v1/rules/{id}", s.putRule)
	handle("DELETE /v1/rules/{id}", s.deleteRule)
	handle("POST /v1/rules:apply", s.applyRules)
	handle("POST /v1/rules:rollback", s.rollback)
	handle("GET /v1/overrides", s.getOverrides)
	handle("PUT /v1/overrides", s.putOverride)
	handle("DELETE /v1/overrides", s.deleteOverride)
	handle("POST /v1/limits/check", s.check)
	handle("GET /v1/limits/{key...}", s.getLimits)
	handle("GET /v1/cluster", s.getCluster)
	handle("GET /healthz", func(w http.ResponseWriter, _ *http.Request) error {
		writeText(w, http.StatusOK, "ok")
		return nil
	})
	handle("GET /readyz", func(w http.ResponseWriter, _ *http.Request) error {
		if err := s.b.Ready(); err != nil {
			writeText(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
			return nil
		}
		writeText(w, http.StatusOK, "ready")
		return nil
	})
	prom := promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{})
	handle("GET /metrics", func(w http.ResponseWriter, r *http.Request) error {
		prom.ServeHTTP(w, r)
		return nil
	})
	handle("/", func(w http.ResponseWriter, r *http.Request) error {
		if allow := allowedMethods(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeJSON(w, http.StatusMethodNotAllowed, errorBody{
				Error: fmt.Sprintf("%s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(allow, ", ")),
				Code:  CodeMethodNotAllowed,
			})
			return nil
		}
		return status.Errorf(codes.NotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
	})
	return mux
}

// CodeMethodNotAllowed is the error code of a 405 answer.
const CodeMethodNotAllowed = "method_not_allowed"

// allowedMethods lists the methods mux serves r's path with (other than
// through the catch-all "/"); empty when the path is unknown.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		probe := &http.Request{Method: m, URL: r.URL, Host: r.Host}
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	return allow
}

// statusWriter records the status code written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument turns h's error into the JSON error body and counts the
// request by route and status code.
func (s *Server) instrument(route string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		if err := h(sw, r); err != nil {
			s.writeError(sw, r, err)
		}
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		s.metrics.httpRequests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	})
}

type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	st := status.Convert(grpcError(err))
	code, name := HTTPStatus(st.Code())
	if code >= 500 {
		s.cfg.Logger.Warn("http request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", st.Message())
	}
	writeJSON(w, code, errorBody{Error: st.Message(), Code: name})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(errorBody{Error: "encoding the response: " + err.Error(), Code: CodeInternal})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func writeText(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, text+"\n")
}

// readBody reads the capped request body; too large is ResourceExhausted.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, status.Errorf(codes.ResourceExhausted, "request body is over the limit of %d bytes", mbe.Limit)
		}
		return nil, status.Errorf(codes.InvalidArgument, "reading the request body: %v", err)
	}
	return b, nil
}

// decodeJSON reads a capped body into v strictly: unknown fields and
// trailing data are errors.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return status.Error(codes.InvalidArgument, "request body is empty; want a JSON object")
		}
		return status.Errorf(codes.InvalidArgument, "malformed JSON body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "malformed JSON body: unexpected data after the JSON object")
	}
	return nil
}

// rpcContext is r's context as the gRPC methods expect it: the
// Authorization header as incoming metadata.
func rpcContext(r *http.Request) context.Context {
	md := metadata.MD{}
	if a := r.Header.Get("Authorization"); a != "" {
		md.Set(mdAuthorization, a)
	}
	return metadata.NewIncomingContext(r.Context(), md)
}

func author(r *http.Request) string {
	if a := r.Header.Get(AuthorHeader); a != "" {
		return a
	}
	return "http:" + r.RemoteAddr
}

func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, status.Errorf(codes.InvalidArgument, "%s=%q: want true or false", name, v)
	}
	return b, nil
}

func queryUint(r *http.Request, name string) (uint64, bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, status.Errorf(codes.InvalidArgument, "%s=%q: want a whole number >= 0", name, v)
	}
	return n, true, nil
}

// ruleSetJSON is the body of GET /v1/rules.
type ruleSetJSON struct {
	Version   uint64           `json:"version"`
	Rules     []rules.Rule     `json:"rules"`
	Overrides []rules.Override `json:"overrides"`
}

func setJSON(set *rules.Set) ruleSetJSON {
	out := ruleSetJSON{Version: set.Version, Rules: set.Rules, Overrides: set.Overrides}
	if out.Rules == nil {
		out.Rules = []rules.Rule{}
	}
	if out.Overrides == nil {
		out.Overrides = []rules.Override{}
	}
	return out
}

// listRules calls ListRules in-process and converts the answer back.
func (s *Server) listRules(r *http.Request) (*rules.Set, error) {
	consistent, err := queryBool(r, "consistent")
	if err != nil {
		return nil, err
	}
	p, err := s.rules.ListRules(rpcContext(r), &weirv1.ListRulesRequest{Consistent: consistent})
	if err != nil {
		return nil, err
	}
	set, err := rulespb.SetFromProto(p)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return set, nil
}

// GET /v1/rules[?consistent=true][&version=N&wait=30s][&at=V]
func (s *Server) getRules(w http.ResponseWriter, r *http.Request) error {
	at, hasAt, err := queryUint(r, "at")
	if err != nil {
		return err
	}
	if hasAt {
		set, err := s.b.Store().SetAt(at)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, setJSON(set))
		return nil
	}
	version, hasVersion, err := queryUint(r, "version")
	if err != nil {
		return err
	}
	if ws := r.URL.Query().Get("wait"); ws != "" {
		wait, err := time.ParseDuration(ws)
		if err != nil || wait < 0 {
			return status.Errorf(codes.InvalidArgument, "wait=%q: want a duration such as 30s", ws)
		}
		if !hasVersion {
			return status.Error(codes.InvalidArgument, "wait needs version=N (the version the caller has)")
		}
		if err := s.longPoll(r.Context(), version, min(wait, s.cfg.MaxWait)); err != nil {
			return err
		}
	}
	set, err := s.listRules(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, setJSON(set))
	return nil
}

// longPoll waits until a version above version exists, wait passes, the
// client goes away or the Server closes. Only a closing Server is an error.
func (s *Server) longPoll(ctx context.Context, version uint64, wait time.Duration) error {
	if wait <= 0 {
		return nil
	}
	if !s.track() {
		return status.Error(codes.Unavailable, "node is shutting down")
	}
	defer s.active.Done()
	ctx, cancel := s.bound(ctx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, wait)
	defer cancelT()
	_, err := s.b.Store().WaitVersion(ctx, version)
	if err != nil && s.ctx.Err() != nil {
		return status.Error(codes.Unavailable, "node is shutting down")
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// GET /v1/rules/{id}
func (s *Server) getRule(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	set, err := s.listRules(r)
	if err != nil {
		return err
	}
	rule, ok := set.Rule(id)
	if !ok {
		return status.Errorf(codes.NotFound, "rule %q not found (version %d)", id, set.Version)
	}
	writeJSON(w, http.StatusOK, struct {
		Version uint64     `json:"version"`
		Rule    rules.Rule `json:"rule"`
	}{set.Version, rule})
	return nil
}

type versionJSON struct {
	Version uint64 `json:"version"`
}

// PUT /v1/rules/{id}
func (s *Server) putRule(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	var rule rules.Rule
	if err := s.decodeJSON(w, r, &rule); err != nil {
		return err
	}
	if rule.ID == "" {
		rule.ID = id
	} else if rule.ID != id {
		return status.Errorf(codes.InvalidArgument, "id: the body says %q but the URL says %q", rule.ID, id)
	}
	resp, err := s.rules.ApplyRules(rpcContext(r), &weirv1.ApplyRulesRequest{
		Rules: []*weirv1.Rule{rulespb.RuleToProto(rule)}, Author: author(r)})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, versionJSON{resp.GetVersion()})
	return nil
}

// DELETE /v1/rules/{id}
func (s *Server) deleteRule(w http.ResponseWriter, r *http.Request) error {
	resp, err := s.rules.DeleteRule(rpcContext(r), &weirv1.DeleteRuleRequest{Id: r.PathValue("id"), Author: author(r)})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, versionJSON{resp.GetVersion()})
	return nil
}

// POST /v1/rules:apply[?dry_run=true][&replace=true]
func (s *Server) applyRules(w http.ResponseWriter, r *http.Request) error {
	dry, err := queryBool(r, "dry_run")
	if err != nil {
		return err
	}
	replace, err := queryBool(r, "replace")
	if err != nil {
		return err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	rs, err := rules.ParseFile(body)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	req := &weirv1.ApplyRulesRequest{ReplaceAll: replace, DryRun: dry, Author: author(r), Rules: make([]*weirv1.Rule, len(rs))}
	for i, rule := range rs {
		req.Rules[i] = rulespb.RuleToProto(rule)
	}
	resp, err := s.rules.ApplyRules(rpcContext(r), req)
	if err != nil {
		return err
	}
	diff := resp.GetDiff()
	if diff == nil {
		diff = []string{}
	}
	writeJSON(w, http.StatusOK, struct {
		Version uint64   `json:"version"`
		Diff    []string `json:"diff"`
		DryRun  bool     `json:"dry_run"`
	}{resp.GetVersion(), diff, dry})
	return nil
}

// GET /v1/rules/history[?limit=N]
func (s *Server) getHistory(w http.ResponseWriter, r *http.Request) error {
	limit, _, err := queryUint(r, "limit")
	if err != nil {
		return err
	}
	if limit > 1<<31 {
		limit = 1 << 31
	}
	resp, err := s.rules.History(rpcContext(r), &weirv1.HistoryRequest{Limit: uint32(limit)})
	if err != nil {
		return err
	}
	type entry struct {
		Version uint64 `json:"version"`
		Author  string `json:"author"`
		At      string `json:"at"`
		Summary string `json:"summary"`
	}
	out := struct {
		Entries []entry `json:"entries"`
	}{Entries: make([]entry, len(resp.GetEntries()))}
	for i, e := range resp.GetEntries() {
		out.Entries[i] = entry{e.GetVersion(), e.GetAuthor(), time.UnixMilli(e.GetAtUnixMs()).UTC().Format(time.RFC3339), e.GetSummary()}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// POST /v1/rules:rollback {"version":N}
func (s *Server) rollback(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Version uint64 `json:"version"`
	}
	if err := s.decodeJSON(w, r, &body); err != nil {
		return err
	}
	resp, err := s.rules.Rollback(rpcContext(r), &weirv1.RollbackRequest{Version: body.Version, Author: author(r)})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, versionJSON{resp.GetVersion()})
	return nil
}

// GET /v1/overrides
func (s *Server) getOverrides(w http.ResponseWriter, r *http.Request) error {
	set, err := s.listRules(r)
	if err != nil {
		return err
	}
	j := setJSON(set)
	writeJSON(w, http.StatusOK, struct {
		Version   uint64           `json:"version"`
		Overrides []rules.Override `json:"overrides"`
	}{j.Version, j.Overrides})
	return nil
}

// PUT /v1/overrides
func (s *Server) putOverride(w http.ResponseWriter, r *http.Request) error {
	var o rules.Override
	if err := s.decodeJSON(w, r, &o); err != nil {
		return err
	}
	resp, err := s.rules.SetOverride(rpcContext(r), &weirv1.SetOverrideRequest{Override: rulespb.OverrideToProto(o), Author: author(r)})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, versionJSON{resp.GetVersion()})
	return nil
}

// DELETE /v1/overrides?key=K&rule=R
func (s *Server) deleteOverride(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	resp, err := s.rules.DeleteOverride(rpcContext(r), &weirv1.DeleteOverrideRequest{Key: q.Get("key"), Rule: q.Get("rule"), Author: author(r)})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, versionJSON{resp.GetVersion()})
	return nil
}

// checkItemJSON is one item of POST /v1/limits/check; a missing cost is 1.
type checkItemJSON struct {
	Key  string `json:"key"`
	Rule string `json:"rule"`
	Cost *int64 `json:"cost"`
}

func (c checkItemJSON) proto() *weirv1.CheckItem {
	cost := int64(1)
	if c.Cost != nil {
		cost = *c.Cost
	}
	return &weirv1.CheckItem{Key: c.Key, Rule: c.Rule, Cost: cost}
}

// checkResultJSON is one decision as the HTTP API reports it.
type checkResultJSON struct {
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	Limit        int64  `json:"limit"`
	ResetMS      int64  `json:"reset_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	WindowMS     int64  `json:"window_ms,omitempty"`
	Shadow       bool   `json:"shadow,omitempty"`
	Error        string `json:"error,omitempty"`
	ErrorCode    string `json:"error_code,omitempty"`
}

// itemErrorName names a CheckResult error code in JSON.
func itemErrorName(c weirv1.ErrorCode) string {
	switch c {
	case weirv1.ErrorCode_ERROR_CODE_UNKNOWN_RULE:
		return "unknown_rule"
	case weirv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT:
		return CodeInvalidArgument
	case weirv1.ErrorCode_ERROR_CODE_UNAVAILABLE:
		return CodeUnavailable
	}
	return CodeInternal
}

func resultJSON(r *weirv1.CheckResult) checkResultJSON {
	out := checkResultJSON{
		Allowed: r.GetAllowed(), Remaining: r.GetRemaining(), Limit: r.GetLimit(),
		ResetMS: r.GetResetMs(), RetryAfterMS: r.GetRetryAfterMs(), WindowMS: r.GetWindowMs(),
		Shadow: r.GetShadow(), Error: r.GetError(),
	}
	if c := r.GetErrorCode(); c != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
		out.ErrorCode = itemErrorName(c)
		if out.Error == "" {
			out.Error = c.String()
		}
	}
	return out
}

// itemStatus is the whole-request error for a single-item check whose item
// failed.
func itemStatus(r *weirv1.CheckResult) error {
	var c codes.Code
	switch r.GetErrorCode() {
	case weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED:
		return nil
	case weirv1.ErrorCode_ERROR_CODE_UNKNOWN_RULE:
		c = codes.NotFound
	case weirv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT:
		c = codes.InvalidArgument
	default:
		c = codes.Unavailable
	}
	msg := r.GetError()
	if msg == "" {
		msg = r.GetErrorCode().String()
	}
	return status.Error(c, msg)
}

// POST /v1/limits/check {key, rule, cost} | {items: [...]}
func (s *Server) check(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		checkItemJSON
		Items []checkItemJSON `json:"items"`
	}
	if err := s.decodeJSON(w, r, &body); err != nil {
		return err
	}
	single := body.Items == nil
	if !single && (body.Key != "" || body.Rule != "" || body.Cost != nil) {
		return status.Error(codes.InvalidArgument, "send either one check (key, rule, cost) or items, not both")
	}
	items := []*weirv1.CheckItem{body.checkItemJSON.proto()}
	if !single {
		items = make([]*weirv1.CheckItem, len(body.Items))
		for i, it := range body.Items {
			items[i] = it.proto()
		}
	}
	resp, err := s.limiter.Check(r.Context(), &weirv1.CheckRequest{Items: items})
	if err != nil {
		return err
	}
	if single {
		res := resp.GetResults()[0]
		if err := itemStatus(res); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, resultJSON(res))
		return nil
	}
	out := struct {
		Results []checkResultJSON `json:"results"`
	}{Results: make([]checkResultJSON, len(resp.GetResults()))}
	for i, res := range resp.GetResults() {
		out.Results[i] = resultJSON(res)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// GET /v1/limits/{key...}
func (s *Server) getLimits(w http.ResponseWriter, r *http.Request) error {
	key := r.PathValue("key")
	resp, err := s.limiter.GetLimits(r.Context(), &weirv1.GetLimitsRequest{Key: key})
	if err != nil {
		return err
	}
	type limitJSON struct {
		Rule string `json:"rule"`
		checkResultJSON
	}
	out := struct {
		Key    string      `json:"key"`
		Limits []limitJSON `json:"limits"`
	}{Key: key, Limits: make([]limitJSON, len(resp.GetLimits()))}
	for i, l := range resp.GetLimits() {
		out.Limits[i] = limitJSON{Rule: l.GetRule(), checkResultJSON: resultJSON(l.GetResult())}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// memberJSON is one member in GET /v1/cluster.
type memberJSON struct {
	ID              string `json:"id"`
	GRPCAddr        string `json:"grpc_addr"`
	HTTPAddr        string `json:"http_addr"`
	RaftAddr        string `json:"raft_addr"`
	GossipAddr      string `json:"gossip_addr"`
	State           string `json:"state"`
	PartitionsOwned uint32 `json:"partitions_owned"`
	ReplicasHeld    uint32 `json:"replicas_held"`
	RaftRole        string `json:"raft_role"`
}

// GET /v1/cluster
func (s *Server) getCluster(w http.ResponseWriter, r *http.Request) error {
	m, err := s.cluster.Members(r.Context(), &weirv1.MembersRequest{})
	if err != nil {
		return err
	}
	st := s.b.Store()
	leader, _ := st.Leader()
	self := s.cfg.NodeID
	if self == "" {
		self = st.ID()
	}
	out := struct {
		Self         string       `json:"self"`
		Leader       string       `json:"leader"`
		RulesVersion uint64       `json:"rules_version"`
		RingVersion  uint64       `json:"ring_version"`
		Members      []memberJSON `json:"members"`
	}{Leader: leader, RulesVersion: st.Current().Version, RingVersion: m.GetRingVersion(),
		Members: make([]memberJSON, len(m.GetMembers()))}
	for i, mb := range m.GetMembers() {
		out.Members[i] = memberJSON{
			ID: mb.GetId(), GRPCAddr: mb.GetGrpcAddr(), HTTPAddr: mb.GetHttpAddr(), RaftAddr: mb.GetRaftAddr(),
			GossipAddr: mb.GetGossipAddr(), State: mb.GetState(), PartitionsOwned: mb.GetPartitionsOwned(),
			ReplicasHeld: mb.GetReplicasHeld(), RaftRole: mb.GetRaftRole(),
		}
	}
	out.Self = self
	writeJSON(w, http.StatusOK, out)
	return nil
}

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
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/weirlimit/weir/internal/httpjson"
	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/authz"
	"github.com/weirlimit/weir/node/events"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// AuthorHeader names the person or tool making an HTTP write (kept in the
// rules history); without it the history records the remote address.
const AuthorHeader = "X-Weir-Author"

// handlerFunc is an HTTP handler whose error becomes the JSON error body.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// checkPattern is the check API's route: the one request a gateway
// without gRPC sends per request it guards.
const checkPattern = "POST /v1/limits/check"

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h handlerFunc) {
		mux.Handle(pattern, s.instrument(pattern, h))
	}
	check := s.instrument(checkPattern, accepts(s.checkHTTP, jsonTypes...))
	mux.Handle(checkPattern, check)
	handle("GET /v1/rules", s.getRules)
	handle("GET /v1/rules/history", s.getHistory)
	handle("GET /v1/rules/{id}", s.getRuleHTTP)
	handle("PUT /v1/rules/{id}", accepts(s.putRule, jsonTypes...))
	handle("DELETE /v1/rules/{id}", s.deleteRuleHTTP)
	handle("POST /v1/rules:apply", accepts(s.applyRulesHTTP, fileTypes...))
	handle("POST /v1/rules:rollback", accepts(s.rollbackHTTP, jsonTypes...))
	handle("GET /v1/overrides", s.getOverrides)
	handle("PUT /v1/overrides", accepts(s.putOverride, jsonTypes...))
	handle("DELETE /v1/overrides", s.deleteOverrideHTTP)
	handle("POST /v1/limits/release", accepts(s.releaseHTTP, jsonTypes...))
	handle("GET /v1/limits/{key...}", s.getLimitsHTTP)
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
	// A caller that may not see keys gets key labels as their hash.
	promHidden := promhttp.HandlerFor(hideKeyLabels{s.cfg.Registry}, promhttp.HandlerOpts{})
	handle("GET /metrics", func(w http.ResponseWriter, r *http.Request) error {
		if authz.FromContext(r.Context()).KeysHidden {
			promHidden.ServeHTTP(w, r)
			return nil
		}
		prom.ServeHTTP(w, r)
		return nil
	})
	handle("/", func(w http.ResponseWriter, r *http.Request) error {
		if allow := allowedMethods(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			httpjson.Write(w, http.StatusMethodNotAllowed, httpjson.ErrorBody{
				Error: fmt.Sprintf("%s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(allow, ", ")),
				Code:  CodeMethodNotAllowed,
			})
			return nil
		}
		return limit.Errorf(limit.ErrNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
	})
	// The check goes straight to its handler, as the mux would send it,
	// without the mux's lookup (its wildcard patterns cost allocations).
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/limits/check" && r.URL.RawPath == "" {
			r.Pattern = checkPattern
			check.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
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
	var ok atomic.Pointer[prometheus.Counter] // the route's 200 series, looked up once
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		if err := h(sw, r); err != nil {
			s.writeError(sw, r, err)
		}
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		if code != http.StatusOK {
			s.metrics.httpRequests.WithLabelValues(route, strconv.Itoa(code)).Inc()
			return
		}
		c := ok.Load()
		if c == nil {
			cc := s.metrics.httpRequests.WithLabelValues(route, "200")
			c = &cc
			ok.Store(c)
		}
		(*c).Inc()
	})
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code, name := HTTPStatus(err)
	if code >= 500 {
		s.cfg.Logger.Warn("http request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err.Error())
	}
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1") // every 429 and 503 says when to come back
	}
	httpjson.Write(w, code, httpjson.ErrorBody{Error: truncate(err.Error(), maxErrorText), Code: name})
}

func writeText(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, text+"\n")
}

// readBody reads the capped request body; too large is limit.ErrTooLarge.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, limit.Errorf(limit.ErrTooLarge, "request body is over the limit of %d bytes", mbe.Limit)
		}
		return nil, limit.Errorf(limit.ErrInvalid, "reading the request body: %v", err)
	}
	return b, nil
}

// decodeJSON reads a capped body into v strictly: text that is not valid
// UTF-8, malformed JSON, unknown fields, trailing data, a name given twice
// in one object and lone surrogate escapes are errors (see strictJSON).
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return decodeJSONBytes(b, v)
}

// decodeJSONBytes is decodeJSON on a body already read.
func decodeJSONBytes(b []byte, v any) error {
	if !utf8.Valid(b) {
		return limit.Errorf(limit.ErrInvalid, "malformed JSON body: not valid UTF-8 at byte %d (JSON text is UTF-8, and keys are compared byte for byte)", invalidUTF8At(b))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return limit.Errorf(limit.ErrInvalid, "request body is empty; want a JSON object")
		}
		return limit.Errorf(limit.ErrInvalid, "malformed JSON body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return limit.Errorf(limit.ErrInvalid, "malformed JSON body: unexpected data after the JSON object")
	}
	return strictJSON(b)
}

// strictJSON refuses what encoding/json accepts silently in a UTF-8 body
// it has decoded, so that what a caller sent is what Weir uses:
//   - \u escapes of lone UTF-16 surrogates: encoding/json replaces them
//     with U+FFFD, as it does bytes that are not UTF-8 (decodeJSON refuses
//     those first), so keys such as "apikey:\xff", "apikey:\udcff" and
//     "apikey:\ufffd" would share one counter;
//   - a name given twice in one object, at any depth ({"cost":-5,"cost":1}):
//     encoding/json keeps the last, so a filter reading the first would
//     see another request than Weir. Names are compared as encoding/json
//     matches them to fields: unescaped, ignoring case.
//
// It is one pass over the bytes, without allocating for a small body (the
// check path's), and relies on b being valid JSON.
func strictJSON(b []byte) error {
	var (
		stackBuf [8]int     // per open object or array: where its names start in names; -1 for an array
		nameBuf  [16][]byte // the names of the open objects, innermost last
	)
	stack, names := stackBuf[:0], nameBuf[:0]
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{':
			stack = append(stack, len(names))
		case '[':
			stack = append(stack, -1)
		case '}', ']':
			if start := stack[len(stack)-1]; start >= 0 {
				names = names[:start]
			}
			stack = stack[:len(stack)-1]
		case '"':
			end, escaped, lone := scanString(b, i)
			if lone >= 0 {
				return limit.Errorf(limit.ErrInvalid, "malformed JSON body: %s at byte %d is half of a UTF-16 surrogate pair, not a character", b[lone:lone+6], lone)
			}
			j := end + 1
			for j < len(b) && (b[j] == ' ' || b[j] == '\t' || b[j] == '\n' || b[j] == '\r') {
				j++
			}
			if j < len(b) && b[j] == ':' { // a name
				name := b[i+1 : end]
				if escaped {
					var u string
					if err := json.Unmarshal(b[i:end+1], &u); err != nil {
						return limit.Errorf(limit.ErrInvalid, "malformed JSON body: %v", err)
					}
					name = []byte(u)
				}
				for _, seen := range names[stack[len(stack)-1]:] {
					if bytes.EqualFold(seen, name) {
						return limit.Errorf(limit.ErrInvalid, "malformed JSON body: %q is given twice in one object", name)
					}
				}
				names = append(names, name)
			}
			i = end
		}
	}
	return nil
}

// scanString reads the JSON string that starts at b[start] (a quote): the
// offset of its closing quote, whether it holds escapes, and the offset of
// its first \u escape of a UTF-16 surrogate not paired as high then low
// (-1: none).
func scanString(b []byte, start int) (end int, escaped bool, lone int) {
	lone = -1
	for i := start + 1; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i, escaped, lone
		case '\\':
			escaped = true
			if b[i+1] != 'u' {
				i++ // a one-letter escape
				continue
			}
			u := hex4(b[i+2 : i+6])
			switch {
			case u >= 0xDC00 && u <= 0xDFFF: // a low half first
			case u >= 0xD800 && u <= 0xDBFF:
				if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
					if lo := hex4(b[i+8 : i+12]); lo >= 0xDC00 && lo <= 0xDFFF {
						i += 11
						continue
					}
				}
			default:
				i += 5
				continue
			}
			if lone < 0 {
				lone = i
			}
			i += 5
		}
	}
	return len(b), escaped, lone
}

// hex4 reads four hex digits (valid JSON guarantees them).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// invalidUTF8At is the offset of the first byte of b that does not start a
// valid UTF-8 sequence.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// httpCaller reads the caller of an HTTP request: its Authorization
// header, and its address for the history.
func httpCaller(r *http.Request) caller {
	c := caller{author: "http:" + r.RemoteAddr, writer: authz.FromContext(r.Context()).Writer()}
	if a := r.Header.Get("Authorization"); a != "" {
		c.auth = []string{a}
	}
	return c
}

// authorizeHTTP checks r's admin token (Server.authorize).
func (s *Server) authorizeHTTP(r *http.Request) (admin, error) {
	return s.authorize(httpCaller(r))
}

func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, limit.Errorf(limit.ErrInvalid, "%s=%q: want true or false", name, v)
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
		return 0, false, limit.Errorf(limit.ErrInvalid, "%s=%q: want a whole number >= 0", name, v)
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

// readStale reads ?stale=true: a local read instead of the default
// read-your-writes one. ?consistent=true is the default, accepted as a
// no-op alias; asking for both is an error.
func readStale(r *http.Request) (bool, error) {
	stale, err := queryBool(r, "stale")
	if err != nil {
		return false, err
	}
	consistent, err := queryBool(r, "consistent")
	if err != nil {
		return false, err
	}
	if stale && consistent {
		return false, limit.Errorf(limit.ErrInvalid, "stale=true and consistent=true: pick one (consistent is the default)")
	}
	return stale, nil
}

// ruleSetReadJSON is a rule set read, with how it was read.
type ruleSetReadJSON struct {
	ruleSetJSON
	// Read is "consistent" (read-your-writes, the default) or "stale".
	Read string `json:"read"`
}

// GET /v1/rules[?stale=true][&version=N&wait=30s][&at=V]
func (s *Server) getRules(w http.ResponseWriter, r *http.Request) error {
	stale, err := readStale(r)
	if err != nil {
		return err
	}
	at, hasAt, err := queryUint(r, "at")
	if err != nil {
		return err
	}
	if hasAt {
		set, ri, err := s.setAt(r.Context(), httpCaller(r), at, stale)
		if err != nil {
			return err
		}
		httpjson.Write(w, http.StatusOK, ruleSetReadJSON{setJSON(set), ri.mode()})
		return nil
	}
	version, hasVersion, err := queryUint(r, "version")
	if err != nil {
		return err
	}
	if ws := r.URL.Query().Get("wait"); ws != "" {
		wait, err := time.ParseDuration(ws)
		if err != nil || wait < 0 {
			return limit.Errorf(limit.ErrInvalid, "wait=%q: want a duration such as 30s", ws)
		}
		if !hasVersion {
			return limit.Errorf(limit.ErrInvalid, "wait needs version=N (the version the caller has)")
		}
		if err := s.longPoll(r.Context(), version, min(wait, s.cfg.MaxWait)); err != nil {
			return err
		}
	}
	set, ri, err := s.listRules(r.Context(), httpCaller(r), stale)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, ruleSetReadJSON{setJSON(set), ri.mode()})
	return nil
}

// longPoll waits until a version above version exists, wait passes, the
// client goes away or the Server closes. Only a closing Server is an error.
func (s *Server) longPoll(ctx context.Context, version uint64, wait time.Duration) error {
	if wait <= 0 {
		return nil
	}
	if !s.track() {
		return limit.Errorf(limit.ErrUnavailable, "node is shutting down")
	}
	defer s.active.Done()
	ctx, cancel := s.bound(ctx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, wait)
	defer cancelT()
	_, err := s.b.Rules().WaitVersion(ctx, version)
	if err != nil && s.ctx.Err() != nil {
		return limit.Errorf(limit.ErrUnavailable, "node is shutting down")
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// GET /v1/rules/{id}[?stale=true]
func (s *Server) getRuleHTTP(w http.ResponseWriter, r *http.Request) error {
	stale, err := readStale(r)
	if err != nil {
		return err
	}
	rule, ri, err := s.getRule(r.Context(), httpCaller(r), r.PathValue("id"), stale)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, struct {
		Version uint64     `json:"version"`
		Rule    rules.Rule `json:"rule"`
		Read    string     `json:"read"`
	}{ri.version, rule, ri.mode()})
	return nil
}

type versionJSON struct {
	Version uint64 `json:"version"`
}

// PUT /v1/rules/{id}
func (s *Server) putRule(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	a, err := s.authorizeHTTP(r) // before the body is read
	if err != nil {
		return err
	}
	var rule rules.Rule
	if err := s.decodeJSON(w, r, &rule); err != nil {
		return err
	}
	if rule.ID == "" {
		rule.ID = id
	} else if rule.ID != id {
		return limit.Errorf(limit.ErrInvalid, "id: the body says %q but the URL says %q", rule.ID, id)
	}
	wr, err := s.applyRules(r.Context(), a, []rules.Rule{rule}, false, false, r.Header.Get(AuthorHeader))
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, versionJSON{wr.version})
	return nil
}

// DELETE /v1/rules/{id}
func (s *Server) deleteRuleHTTP(w http.ResponseWriter, r *http.Request) error {
	a, err := s.authorizeHTTP(r)
	if err != nil {
		return err
	}
	wr, err := s.deleteRule(r.Context(), a, r.PathValue("id"), r.Header.Get(AuthorHeader))
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, versionJSON{wr.version})
	return nil
}

// POST /v1/rules:apply[?dry_run=true][&replace=true]
func (s *Server) applyRulesHTTP(w http.ResponseWriter, r *http.Request) error {
	dry, err := queryBool(r, "dry_run")
	if err != nil {
		return err
	}
	replace, err := queryBool(r, "replace")
	if err != nil {
		return err
	}
	a, err := s.authorizeHTTP(r) // before the body is read
	if err != nil {
		return err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	rs, err := rules.ParseFile(body)
	if err != nil {
		return limit.Errorf(limit.ErrInvalid, "%w", err)
	}
	wr, err := s.applyRules(r.Context(), a, rs, replace, dry, r.Header.Get(AuthorHeader))
	if err != nil {
		return err
	}
	diff := wr.diff
	if diff == nil {
		diff = []string{}
	}
	httpjson.Write(w, http.StatusOK, struct {
		Version uint64   `json:"version"`
		Diff    []string `json:"diff"`
		DryRun  bool     `json:"dry_run"`
	}{wr.version, diff, dry})
	return nil
}

// GET /v1/rules/history[?limit=N][&stale=true]
func (s *Server) getHistory(w http.ResponseWriter, r *http.Request) error {
	n, _, err := queryUint(r, "limit")
	if err != nil {
		return err
	}
	if n > 1<<31 {
		n = 1 << 31
	}
	stale, err := readStale(r)
	if err != nil {
		return err
	}
	hs, ri, err := s.history(r.Context(), httpCaller(r), int(n), stale)
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
		// Version is the local set's version the answer was read at.
		Version uint64 `json:"version"`
		Read    string `json:"read"`
	}{Entries: make([]entry, len(hs)), Version: ri.version, Read: ri.mode()}
	for i, e := range hs {
		out.Entries[i] = entry{e.Version, e.Author, time.UnixMilli(e.At.UnixMilli()).UTC().Format(time.RFC3339), e.Summary}
	}
	httpjson.Write(w, http.StatusOK, out)
	return nil
}

// POST /v1/rules:rollback {"version":N}
func (s *Server) rollbackHTTP(w http.ResponseWriter, r *http.Request) error {
	a, err := s.authorizeHTTP(r) // before the body is read
	if err != nil {
		return err
	}
	var body struct {
		Version uint64 `json:"version"`
	}
	if err := s.decodeJSON(w, r, &body); err != nil {
		return err
	}
	wr, err := s.rollback(r.Context(), a, body.Version, r.Header.Get(AuthorHeader))
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, versionJSON{wr.version})
	return nil
}

// GET /v1/overrides[?stale=true]
func (s *Server) getOverrides(w http.ResponseWriter, r *http.Request) error {
	stale, err := readStale(r)
	if err != nil {
		return err
	}
	set, ri, err := s.listRules(r.Context(), httpCaller(r), stale)
	if err != nil {
		return err
	}
	j := setJSON(set)
	httpjson.Write(w, http.StatusOK, struct {
		Version   uint64           `json:"version"`
		Overrides []rules.Override `json:"overrides"`
		Read      string           `json:"read"`
	}{j.Version, j.Overrides, ri.mode()})
	return nil
}

// PUT /v1/overrides
func (s *Server) putOverride(w http.ResponseWriter, r *http.Request) error {
	a, err := s.authorizeHTTP(r) // before the body is read
	if err != nil {
		return err
	}
	var o rules.Override
	if err := s.decodeJSON(w, r, &o); err != nil {
		return err
	}
	wr, err := s.setOverride(r.Context(), a, o, r.Header.Get(AuthorHeader))
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, versionJSON{wr.version})
	return nil
}

// DELETE /v1/overrides?key=K&rule=R
func (s *Server) deleteOverrideHTTP(w http.ResponseWriter, r *http.Request) error {
	a, err := s.authorizeHTTP(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	wr, err := s.deleteOverride(r.Context(), a, q.Get("key"), q.Get("rule"), r.Header.Get(AuthorHeader))
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, versionJSON{wr.version})
	return nil
}

// checkItemJSON is one item of POST /v1/limits/check; a missing cost is 1.
// MinRuleVersion (optional) is a rules version the answer must reflect,
// e.g. the version a rule write answered: a node that has not applied it
// waits briefly, then answers 503 (unavailable) rather than decide by
// older rules.
type checkItemJSON struct {
	Key            string `json:"key"`
	Rule           string `json:"rule"`
	Cost           *int64 `json:"cost"`
	MinRuleVersion uint64 `json:"min_rule_version"`
	// Priority is the request's class under rules with a reserve.
	Priority string `json:"priority"`
}

func (c checkItemJSON) item() limit.Item {
	cost := int64(1)
	if c.Cost != nil {
		cost = *c.Cost
	}
	return limit.Item{Key: c.Key, Rule: c.Rule, Cost: cost, RuleVersion: c.MinRuleVersion, Priority: c.Priority}
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
	// RuleVersion is the rules version that decided the item.
	RuleVersion uint64 `json:"rule_version,omitempty"`
	// Permit, for a concurrency rule, is the permit an allowed check holds
	// until POST /v1/limits/release or PermitExpiresMS from now.
	Permit          string `json:"permit,omitempty"`
	PermitExpiresMS int64  `json:"permit_expires_ms,omitempty"`
	// Shed: denied to keep the rule's reserve for other classes (answer
	// your client 503, not 429).
	Shed bool `json:"shed,omitempty"`
}

func resultJSON(r *limit.Result) checkResultJSON {
	out := checkResultJSON{
		Allowed: r.Allowed, Remaining: r.Remaining, Limit: r.Limit,
		ResetMS: limit.Millis(r.Reset), RetryAfterMS: limit.Millis(r.RetryAfter), WindowMS: limit.Millis(r.Window),
		Shadow: r.Shadow, Error: r.Err, RuleVersion: r.RuleVersion,
	}
	if !r.Permit.Zero() {
		out.Permit, out.PermitExpiresMS = limit.FormatPermit(r.Permit), limit.Millis(r.PermitExpires)
	}
	out.Shed = r.Shed
	if r.Code != limit.CodeNone {
		out.ErrorCode = r.Code.String()
		if out.Error == "" {
			out.Error = out.ErrorCode
		}
	}
	return out
}

// itemError is the whole-request error for a single-item check whose item
// could not be decided.
func itemError(r *limit.Result) error {
	var kind error
	switch r.Code {
	case limit.CodeNone:
		return nil
	case limit.CodeUnknownRule:
		kind = limit.ErrNotFound
	case limit.CodeInvalid:
		kind = limit.ErrInvalid
	default:
		kind = limit.ErrUnavailable
	}
	msg := r.Err
	if msg == "" {
		msg = r.Code.String()
	}
	return limit.Errorf(kind, "%s", msg)
}

// POST /v1/limits/check {key, rule, cost, min_rule_version} | {items: [...]}
func (s *Server) checkHTTP(w http.ResponseWriter, r *http.Request) error {
	bp := bodyPool.Get().(*bodyBuf)
	defer bodyPool.Put(bp)
	b, err := s.readBodyInto(w, r, bp)
	if err != nil {
		return err
	}
	var body struct {
		checkItemJSON
		Items []checkItemJSON `json:"items"`
	}
	if c, ok := parseCheckFast(b); ok {
		body.checkItemJSON = c
	} else if err := decodeJSONBytes(b, &body); err != nil {
		return err
	}
	single := body.Items == nil
	if !single && (body.Key != "" || body.Rule != "" || body.Cost != nil || body.MinRuleVersion != 0) {
		return limit.Errorf(limit.ErrInvalid, "send either one check (key, rule, cost, min_rule_version) or items, not both")
	}
	var items []limit.Item
	if single {
		items = []limit.Item{body.item()}
	} else {
		items = make([]limit.Item, len(body.Items))
		for i, it := range body.Items {
			items[i] = it.item()
		}
	}
	res := make([]limit.Result, len(items))
	if err := s.check(tracing.FromHeader(r.Context(), r.Header), items, res); err != nil {
		return err
	}
	if single {
		if err := itemError(&res[0]); err != nil {
			return err
		}
		if out, ok := appendResultJSON(bp.b[:0], &res[0]); ok {
			bp.b = out
			w.Header()["Content-Type"] = contentTypeJSON
			_, _ = w.Write(out)
			return nil
		}
		httpjson.Write(w, http.StatusOK, resultJSON(&res[0]))
		return nil
	}
	out := struct {
		Results []checkResultJSON `json:"results"`
	}{Results: make([]checkResultJSON, len(res))}
	for i := range res {
		out.Results[i] = resultJSON(&res[i])
	}
	httpjson.Write(w, http.StatusOK, out)
	return nil
}

// GET /v1/limits/{key...}[?plan=P]
func (s *Server) getLimitsHTTP(w http.ResponseWriter, r *http.Request) error {
	key := r.PathValue("key")
	ls, err := s.getLimits(r.Context(), key)
	if err != nil {
		return err
	}
	if plan := r.URL.Query().Get("plan"); plan != "" {
		if ls, err = forPlan(s.b.Rules().Current(), ls, plan); err != nil {
			return err
		}
	}
	// ResetAt is when the bucket is full again / the window ends, to the
	// millisecond (RFC 3339, UTC; in the rule's zone for a calendar rule,
	// which Calendar and Timezone then name); empty for an item not
	// decided (or one that never resets: a block with no end).
	type limitJSON struct {
		Rule string `json:"rule"`
		checkResultJSON
		ResetAt  string `json:"reset_at,omitempty"`
		Calendar string `json:"calendar,omitempty"`
		Timezone string `json:"timezone,omitempty"`
		// PermitsHeld, for a concurrency rule, is the key's requests in
		// flight: permits held now.
		PermitsHeld *int64 `json:"permits_held,omitempty"`
	}
	out := struct {
		Key    string      `json:"key"`
		Limits []limitJSON `json:"limits"`
	}{Key: key, Limits: make([]limitJSON, len(ls))}
	now := s.cfg.Now()
	set := s.b.Rules().Current()
	for i := range ls {
		l := limitJSON{Rule: ls[i].Rule, checkResultJSON: resultJSON(&ls[i].Result)}
		zone := time.UTC
		r, ok := ruleOf(set, l.Rule)
		if ok && r.Calendar != "" {
			l.Calendar, l.Timezone = r.Calendar, r.Timezone
			if l.Timezone == "" {
				l.Timezone = rules.DefaultTimezone
			}
			if loc, err := rules.LoadZone(r.Timezone); err == nil {
				zone = loc
			}
		}
		if ls[i].Result.Code == limit.CodeNone && l.ResetMS >= 0 {
			l.ResetAt = now.Add(time.Duration(l.ResetMS) * time.Millisecond).In(zone).Format("2006-01-02T15:04:05.000Z07:00")
		}
		if ls[i].Result.Code == limit.CodeNone && ok && r.HoldsPermits() {
			held := max(ls[i].Result.Limit-ls[i].Result.Remaining, 0)
			l.PermitsHeld = &held
		}
		out.Limits[i] = l
	}
	httpjson.Write(w, http.StatusOK, out)
	return nil
}

// ruleOf is the rule id of set, if set (nil: none) holds it.
func ruleOf(set *rules.Set, id string) (rules.Rule, bool) {
	if set == nil {
		return rules.Rule{}, false
	}
	return set.Rule(id)
}

// forPlan keeps the limits of the rules that apply to requests of plan
// (rules.Matcher.AppliesToPlan: a plan's own rule replaces the "*" one).
func forPlan(set *rules.Set, ls []KeyLimit, plan string) ([]KeyLimit, error) {
	m, err := rules.Compile(set.Rules)
	if err != nil {
		return nil, limit.Errorf(limit.ErrUnavailable, "compiling rules version %d: %v", set.Version, err)
	}
	out := ls[:0]
	for _, l := range ls {
		if m.AppliesToPlan(l.Rule, plan) {
			out = append(out, l)
		}
	}
	return out, nil
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
	m, err := s.b.Members(r.Context())
	if err != nil {
		return err
	}
	st := s.b.Rules()
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
		NoLeader     string       `json:"no_leader,omitempty"`
	}{Self: self, Leader: leader, RulesVersion: st.Current().Version, RingVersion: m.RingVersion, NoLeader: m.NoLeader,
		Members: make([]memberJSON, len(m.Members))}
	for i, mb := range m.Members {
		out.Members[i] = memberJSON{
			ID: mb.ID, GRPCAddr: mb.GRPCAddr, HTTPAddr: mb.HTTPAddr, RaftAddr: mb.RaftAddr,
			GossipAddr: mb.GossipAddr, State: mb.State, PartitionsOwned: mb.PartitionsOwned,
			ReplicasHeld: mb.ReplicasHeld, RaftRole: mb.RaftRole,
		}
	}
	httpjson.Write(w, http.StatusOK, out)
	return nil
}

// hideKeyLabels gathers g with every "key" label value replaced by its
// events.Redact hash (weir_hot_key_rate carries keys): /metrics for a
// caller without the read role once reads are guarded.
type hideKeyLabels struct{ g prometheus.Gatherer }

func (h hideKeyLabels) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := h.g.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "key" {
					l.Value = proto.String(events.Redact(l.GetValue()))
				}
			}
		}
	}
	return mfs, err
}

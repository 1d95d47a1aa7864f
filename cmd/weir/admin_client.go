package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// Errors of the admin client. Each message printed adds the details.
var (
	// errUnreachable: no HTTP answer (refused, no such host, reset).
	errUnreachable = errors.New("weir: cannot reach node")
	// errTimeout: the node did not answer within --timeout.
	errTimeout = errors.New("weir: node did not answer in time")
	// errInterrupted: the command was cancelled by a signal.
	errInterrupted = errors.New("weir: interrupted")
	// errBadAnswer: the node answered something that is not the API's JSON.
	errBadAnswer = errors.New("weir: unexpected answer from node")
	// errAPI is matched by every *apiError.
	errAPI = errors.New("weir: request refused by node")
)

// maxAnswer caps how much of an answer the client reads.
const maxAnswer = 64 << 20

// apiError is a non-2xx answer: the server's sentence and code.
type apiError struct {
	Status  int    // HTTP status
	Code    string // "not_found", "unauthorized", ...
	Message string // the server's "error" sentence
	hint    string // what the user can do, added by the client
}

func (e *apiError) Error() string {
	if e.hint == "" {
		return e.Message
	}
	return e.Message + " (" + e.hint + ")"
}

func (e *apiError) Unwrap() error { return errAPI }

// apiClient speaks a node's HTTP/JSON API (the contract in node/api). Every
// method returns the decoded answer and its raw JSON (for -o json).
type apiClient struct {
	base      string // "http://127.0.0.1:8080", no trailing slash
	token     string
	author    string // sent as X-Weir-Author; kept in the rules history
	timeout   time.Duration
	transport *http.Transport
	http      *http.Client
}

func newAPIClient(base, token string, timeout time.Duration) *apiClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &sniffConn{Conn: c}, nil
	}
	return &apiClient{
		base:      base,
		token:     token,
		timeout:   timeout,
		transport: tr,
		http:      &http.Client{Transport: tr, Timeout: timeout},
	}
}

// close releases the client's idle connections (and their goroutines).
func (c *apiClient) close() { c.transport.CloseIdleConnections() }

// notLeaderRetry bounds how long a request answered not_leader (a Raft
// election under way: "retry shortly") is sent again before that answer
// is shown: elections take a second or two. Nothing was applied (the node
// refuses before the write enters the log), so sending again is safe.
const notLeaderRetry = 5 * time.Second

// do sends one request, again while it is answered not_leader (for at
// most notLeaderRetry within the client's timeout). body, when not nil, is
// sent with contentType. A 2xx answer is decoded into out (when not nil)
// and returned raw.
func (c *apiClient) do(ctx context.Context, method, path string, q url.Values, body []byte, contentType string, out any) ([]byte, error) {
	until := time.Now().Add(min(c.timeout, notLeaderRetry))
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		data, err := c.once(ctx, method, path, q, body, contentType, out)
		var ae *apiError
		if !errors.As(err, &ae) || ae.Code != "not_leader" || time.Now().Add(wait).After(until) {
			return data, err
		}
		select {
		case <-ctx.Done():
			return data, err
		case <-time.After(wait):
		}
	}
}

// once sends the request once (do).
func (c *apiClient) once(ctx context.Context, method, path string, q url.Values, body []byte, contentType string, out any) ([]byte, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v", errUnreachable, c.base, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "weir-cli")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.author != "" && method != http.MethodGet {
		req.Header.Set(authorHeader, c.author)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	if len(data) > maxAnswer {
		return nil, fmt.Errorf("%w: the answer of %s %s is over %d MiB", errBadAnswer, method, path, maxAnswer>>20)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, c.answerError(resp, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("%w: %s %s at %s answered %s, which is not the JSON expected (%v); is --addr a Weir node's HTTP address?",
				errBadAnswer, method, path, c.base, describeBody(data), err)
		}
	}
	return data, nil
}

// transportError turns a failed round trip into one sentence.
func (c *apiClient) transportError(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return errInterrupted
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s did not answer within %s (raise --timeout, or check the node)", errTimeout, c.base, c.timeout)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%w at %s: connection refused (is `weir node` running? set --addr or %s)", errUnreachable, c.base, envAddr)
	}
	if errors.Is(err, errGRPCPort) {
		return fmt.Errorf("%w at %s: it answers in HTTP/2 binary frames, so it is likely the node's gRPC port; --addr takes its HTTP address (the node's --http, default port 8080)", errUnreachable, c.base)
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return fmt.Errorf("%w at %s: no such host %q (set --addr or %s)", errUnreachable, c.base, dns.Name, envAddr)
	}
	// Strip url.Error's "Get \"http://...\":" and net.OpError's "dial tcp
	// 1.2.3.4:80:" prefixes: the address is already in the sentence.
	reason := err
	if ue != nil {
		reason = ue.Err
	}
	var op *net.OpError
	if errors.As(reason, &op) && op.Err != nil {
		reason = op.Err
	}
	return fmt.Errorf("%w at %s: %v", errUnreachable, c.base, reason)
}

// answerError turns a non-2xx answer into an *apiError.
func (c *apiClient) answerError(resp *http.Response, data []byte) error {
	var body struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	e := &apiError{Status: resp.StatusCode}
	if json.Unmarshal(data, &body) == nil && body.Error != "" {
		e.Message, e.Code = body.Error, body.Code
	} else {
		e.Message = fmt.Sprintf("%s answered %s: %s", c.base, resp.Status, describeBody(data))
	}
	switch {
	case e.Code == "unauthorized" || resp.StatusCode == http.StatusUnauthorized:
		if c.token == "" {
			e.hint = "this node needs an admin token: set --token or " + envToken
		} else {
			e.hint = "check --token or " + envToken
		}
	case e.Code == "too_large" || resp.StatusCode == http.StatusRequestEntityTooLarge:
		e.hint = "the node caps request bodies; split the file or raise the node's limit"
	}
	return e
}

// describeBody names a body for an error message: its first line, cut.
func describeBody(data []byte) string {
	s := strings.TrimSpace(string(data))
	if s == "" {
		return "an empty body"
	}
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	if len(s) > 200 {
		s = s[:200] + " ..."
	}
	return strconv.Quote(s)
}

func (c *apiClient) getJSON(ctx context.Context, path string, q url.Values, out any) ([]byte, error) {
	return c.do(ctx, http.MethodGet, path, q, nil, "", out)
}

func (c *apiClient) sendJSON(ctx context.Context, method, path string, q url.Values, in, out any) ([]byte, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("weir: encode request: %w", err)
	}
	return c.do(ctx, method, path, q, body, "application/json", out)
}

// Answers of the API.

// Reads answer how they were read: "consistent" (read-your-writes, the
// default) or "stale" (the answering node's copy); empty from a node that
// predates read-your-writes.

type rulesAnswer struct {
	Version   uint64           `json:"version"`
	Rules     []rules.Rule     `json:"rules"`
	Overrides []rules.Override `json:"overrides"`
	Read      string           `json:"read"`
}

type ruleAnswer struct {
	Version uint64     `json:"version"`
	Rule    rules.Rule `json:"rule"`
	Read    string     `json:"read"`
}

type versionAnswer struct {
	Version uint64 `json:"version"`
}

type applyAnswer struct {
	Version uint64   `json:"version"`
	Diff    []string `json:"diff"`
	DryRun  bool     `json:"dry_run"`
}

type historyEntry struct {
	Version uint64 `json:"version"`
	Author  string `json:"author"`
	At      string `json:"at"`
	Summary string `json:"summary"`
}

type historyAnswer struct {
	Entries []historyEntry `json:"entries"`
	Version uint64         `json:"version"`
	Read    string         `json:"read"`
}

type overridesAnswer struct {
	Version   uint64           `json:"version"`
	Overrides []rules.Override `json:"overrides"`
	Read      string           `json:"read"`
}

type checkRequest struct {
	Key            string `json:"key"`
	Rule           string `json:"rule"`
	Cost           int64  `json:"cost"`
	MinRuleVersion uint64 `json:"min_rule_version,omitempty"`
}

type decision struct {
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	Limit        int64  `json:"limit"`
	ResetMS      int64  `json:"reset_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Error        string `json:"error,omitempty"`
}

type member struct {
	ID              string `json:"id"`
	GRPCAddr        string `json:"grpc_addr"`
	HTTPAddr        string `json:"http_addr"`
	RaftAddr        string `json:"raft_addr"`
	GossipAddr      string `json:"gossip_addr"`
	State           string `json:"state"`
	PartitionsOwned int    `json:"partitions_owned"`
	ReplicasHeld    int    `json:"replicas_held"`
	RaftRole        string `json:"raft_role"`
}

type clusterAnswer struct {
	Self         string   `json:"self"`
	Leader       string   `json:"leader"`
	RulesVersion uint64   `json:"rules_version"`
	RingVersion  uint64   `json:"ring_version"`
	Members      []member `json:"members"`
	NoLeader     string   `json:"no_leader,omitempty"`
}

// Endpoints.

// readQuery is the query of a read: read-your-writes (the node's
// default), or with stale the answering node's local copy.
func readQuery(stale bool) url.Values {
	q := url.Values{}
	if stale {
		q.Set("stale", "true")
	}
	return q
}

// listRules answers GET /v1/rules; at > 0 asks for the set as of version
// at; stale for the answering node's local copy.
func (c *apiClient) listRules(ctx context.Context, at uint64, stale bool) (rulesAnswer, []byte, error) {
	q := readQuery(stale)
	if at > 0 {
		q.Set("at", strconv.FormatUint(at, 10))
	}
	var a rulesAnswer
	raw, err := c.getJSON(ctx, "/v1/rules", q, &a)
	return a, raw, err
}

func (c *apiClient) getRule(ctx context.Context, id string, stale bool) (ruleAnswer, []byte, error) {
	var a ruleAnswer
	raw, err := c.getJSON(ctx, "/v1/rules/"+url.PathEscape(id), readQuery(stale), &a)
	return a, raw, err
}

func (c *apiClient) putRule(ctx context.Context, r rules.Rule) (versionAnswer, []byte, error) {
	var a versionAnswer
	raw, err := c.sendJSON(ctx, http.MethodPut, "/v1/rules/"+url.PathEscape(r.ID), nil, r, &a)
	return a, raw, err
}

func (c *apiClient) deleteRule(ctx context.Context, id string) (versionAnswer, []byte, error) {
	var a versionAnswer
	raw, err := c.do(ctx, http.MethodDelete, "/v1/rules/"+url.PathEscape(id), nil, nil, "", &a)
	return a, raw, err
}

// applyRules posts a rules file as it was written (YAML or JSON).
func (c *apiClient) applyRules(ctx context.Context, file []byte, dryRun, replace bool) (applyAnswer, []byte, error) {
	q := url.Values{}
	if dryRun {
		q.Set("dry_run", "true")
	}
	if replace {
		q.Set("replace", "true")
	}
	ctype := "application/yaml"
	if t := bytes.TrimSpace(file); len(t) > 0 && t[0] == '{' {
		ctype = "application/json"
	}
	var a applyAnswer
	raw, err := c.do(ctx, http.MethodPost, "/v1/rules:apply", q, file, ctype, &a)
	return a, raw, err
}

// history answers GET /v1/rules/history; limit 0 leaves the server's default.
func (c *apiClient) history(ctx context.Context, limit int, stale bool) (historyAnswer, []byte, error) {
	q := readQuery(stale)
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var a historyAnswer
	raw, err := c.getJSON(ctx, "/v1/rules/history", q, &a)
	return a, raw, err
}

func (c *apiClient) rollback(ctx context.Context, version uint64) (versionAnswer, []byte, error) {
	var a versionAnswer
	raw, err := c.sendJSON(ctx, http.MethodPost, "/v1/rules:rollback", nil, versionAnswer{Version: version}, &a)
	return a, raw, err
}

func (c *apiClient) listOverrides(ctx context.Context, stale bool) (overridesAnswer, []byte, error) {
	var a overridesAnswer
	raw, err := c.getJSON(ctx, "/v1/overrides", readQuery(stale), &a)
	return a, raw, err
}

func (c *apiClient) putOverride(ctx context.Context, o rules.Override) (versionAnswer, []byte, error) {
	var a versionAnswer
	raw, err := c.sendJSON(ctx, http.MethodPut, "/v1/overrides", nil, o, &a)
	return a, raw, err
}

func (c *apiClient) deleteOverride(ctx context.Context, key, rule string) (versionAnswer, []byte, error) {
	q := url.Values{"key": {key}, "rule": {rule}}
	var a versionAnswer
	raw, err := c.do(ctx, http.MethodDelete, "/v1/overrides", q, nil, "", &a)
	return a, raw, err
}

func (c *apiClient) check(ctx context.Context, req checkRequest) (decision, []byte, error) {
	var a decision
	raw, err := c.sendJSON(ctx, http.MethodPost, "/v1/limits/check", nil, req, &a)
	return a, raw, err
}

func (c *apiClient) cluster(ctx context.Context) (clusterAnswer, []byte, error) {
	var a clusterAnswer
	raw, err := c.getJSON(ctx, "/v1/cluster", nil, &a)
	return a, raw, err
}

// errGRPCPort: the address answered with an HTTP/2 frame where an
// HTTP/1.1 answer was due (sniffConn).
var errGRPCPort = errors.New("the server speaks HTTP/2 frames (a gRPC port)")

// sniffConn fails its first read with errGRPCPort when the bytes open with
// an HTTP/2 frame header: a gRPC port's server preface, a SETTINGS frame
// (type 4) whose length starts with a zero byte. An HTTP/1.1 answer opens
// with "HTTP/". It only looks at the connection's first read.
type sniffConn struct {
	net.Conn
	seen bool
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.seen && n > 0 {
		c.seen = true
		if n >= 4 && p[0] == 0 && p[3] == 4 {
			return 0, errGRPCPort
		}
	}
	return n, err
}

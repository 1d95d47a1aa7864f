package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/rulesraft"
	"github.com/weirlimit/weir/rulesraft/rules"
)

func testRule(id string, rate int64) *weirv1.Rule {
	return &weirv1.Rule{Id: id, Match: &weirv1.Match{Route: "/" + id}, Key: "ip", Rate: rate, Period: "1s"}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestGRPCWatch(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	ctx := ctxT(t)
	rc := weirv1.NewRulesClient(n.conn)
	if _, err := rc.ApplyRules(ctx, &weirv1.ApplyRulesRequest{Rules: []*weirv1.Rule{testRule("a", 1)}}); err != nil {
		t.Fatal(err)
	}
	n.b.gateways.Store(3)

	wctx, stop := context.WithCancel(ctx)
	stream, err := rc.Watch(wctx, &weirv1.WatchRequest{GatewayId: "gw-1"})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ev.GetVersion() != n.version() || len(ev.GetFull().GetRules()) != 1 || ev.GetGateways() != 3 || ev.GetFull().GetVersion() != ev.GetVersion() {
		t.Fatalf("first event: %v", ev)
	}
	testwait.Until(t, "gateway counted", func() bool { return n.srv.Gateways() == 1 })

	var want []uint64
	for i := range 3 {
		resp, err := rc.ApplyRules(ctx, &weirv1.ApplyRulesRequest{Rules: []*weirv1.Rule{testRule(fmt.Sprintf("r%d", i), 5)}})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, resp.GetVersion())
	}
	for i, v := range want {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetVersion() != v || len(ev.GetFull().GetRules()) != 2+i {
			t.Fatalf("event %d: version %d with %d rules, want version %d", i, ev.GetVersion(), len(ev.GetFull().GetRules()), v)
		}
	}

	// Resuming from the last version sends only later changes.
	resume, err := rc.Watch(ctx, &weirv1.WatchRequest{FromVersion: want[2]})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rc.DeleteRule(ctx, &weirv1.DeleteRuleRequest{Id: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := resume.Recv(); err != nil || ev.GetVersion() != resp.GetVersion() {
		t.Fatalf("resumed watch: %v %v, want version %d", ev, err, resp.GetVersion())
	}
	if n.srv.Gateways() != 1 {
		t.Errorf("a watch without gateway_id was counted: %d", n.srv.Gateways())
	}

	stop()
	testwait.Until(t, "gateway released", func() bool { return n.srv.Gateways() == 0 })
}

func TestGRPCCloseEndsStreams(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	ctx := ctxT(t)
	watch, err := weirv1.NewRulesClient(n.conn).Watch(ctx, &weirv1.WatchRequest{GatewayId: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	members, err := weirv1.NewClusterClient(n.conn).WatchMembers(ctx, &weirv1.MembersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := members.Recv(); err != nil || len(m.GetMembers()) != 1 {
		t.Fatalf("members: %v %v", m, err)
	}
	longPoll := make(chan reply, 1)
	go func() { longPoll <- n.do(t, "GET", "/v1/rules?version="+u(n.version())+"&wait=60s", nil) }()
	testwait.Until(t, "watch registered", func() bool { return n.srv.Gateways() == 1 })

	n.srv.Close()
	if _, err := watch.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("watch after Close: %v", err)
	}
	if _, err := members.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("watch members after Close: %v", err)
	}
	select {
	case r := <-longPoll:
		if r.code != http.StatusServiceUnavailable {
			t.Fatalf("long poll after Close: %d %s", r.code, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long poll still waiting after Close")
	}
	if n.srv.Gateways() != 0 {
		t.Fatalf("gateways after Close: %d", n.srv.Gateways())
	}
	n.srv.Close() // idempotent
}

func TestGRPCCheckShape(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	ctx := ctxT(t)
	if _, err := weirv1.NewRulesClient(n.conn).ApplyRules(ctx, &weirv1.ApplyRulesRequest{Rules: []*weirv1.Rule{testRule("a", 10)}}); err != nil {
		t.Fatal(err)
	}
	lc := weirv1.NewLimiterClient(n.conn)
	_, err := lc.Check(ctx, &weirv1.CheckRequest{Items: make([]*weirv1.CheckItem, MaxItems+1)})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "10000") {
		t.Fatalf("too many items: %v", err)
	}
	resp, err := lc.Check(ctx, &weirv1.CheckRequest{Items: []*weirv1.CheckItem{
		{Key: "ip:1", Rule: "a", Cost: 3},
		{Key: "", Rule: "a", Cost: 1},
		{Key: strings.Repeat("x", limit.MaxKeyLen+1), Rule: "a", Cost: 1},
		{Key: strings.Repeat("x", limit.MaxKeyLen), Rule: "", Cost: 1},
		{Key: "ip:1", Rule: "a", Cost: -1},
		{Key: "ip:1", Rule: "zzz", Cost: 1},
		{Key: "ip:1", Rule: "a", Cost: 0},
	}})
	if err != nil {
		t.Fatal(err)
	}
	rs := resp.GetResults()
	if len(rs) != 7 || !rs[0].GetAllowed() || rs[0].GetRemaining() != 7 {
		t.Fatalf("results: %v", rs)
	}
	for i, field := range map[int]string{1: "key", 2: "key", 3: "rule", 4: "cost"} {
		if rs[i].GetAllowed() || rs[i].GetErrorCode() != weirv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT || !strings.HasPrefix(rs[i].GetError(), field) {
			t.Errorf("item %d: %v", i, rs[i])
		}
	}
	if rs[5].GetErrorCode() != weirv1.ErrorCode_ERROR_CODE_UNKNOWN_RULE {
		t.Errorf("unknown rule: %v", rs[5])
	}
	if !rs[6].GetAllowed() || rs[6].GetRemaining() != 7 {
		t.Errorf("peek after the bad items (which took nothing): %v", rs[6])
	}
	if _, err := lc.GetLimits(ctx, &weirv1.GetLimitsRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("GetLimits with no key: %v", err)
	}
}

func TestGRPCRulesValidation(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	ctx := ctxT(t)
	rc := weirv1.NewRulesClient(n.conn)
	v := n.version()
	bad := []*weirv1.Rule{testRule("ok", 1), {Id: "bad", Match: &weirv1.Match{Route: "nope"}, Key: "ip", Rate: -1, Period: "1s"}, testRule("ok", 2), {Id: "d", Period: "soon"}}
	_, err := rc.ApplyRules(ctx, &weirv1.ApplyRulesRequest{Rules: bad[:3]})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad rules: %v", err)
	}
	for _, want := range []string{"rules[1].match.route", "rules[1].rate", "rules[2].id", "duplicate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not list %q: %v", want, err)
		}
	}
	if _, err := rc.ApplyRules(ctx, &weirv1.ApplyRulesRequest{Rules: bad[3:]}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "soon") {
		t.Errorf("bad duration: %v", err)
	}
	if _, err := rc.ApplyRules(ctx, &weirv1.ApplyRulesRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no rules: %v", err)
	}
	if _, err := rc.SetOverride(ctx, &weirv1.SetOverrideRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no override: %v", err)
	}
	if n.version() != v {
		t.Fatalf("rejected writes changed the version %d -> %d", v, n.version())
	}
	// A valid apply records its author; GetRule and ListRules see it.
	if _, err := rc.ApplyRules(ctx, &weirv1.ApplyRulesRequest{Rules: []*weirv1.Rule{testRule("ok", 1)}, Author: "bob"}); err != nil {
		t.Fatal(err)
	}
	if h, err := rc.History(ctx, &weirv1.HistoryRequest{Limit: 1}); err != nil || h.GetEntries()[0].GetAuthor() != "bob" {
		t.Fatalf("history: %v %v", h, err)
	}
	if r, err := rc.GetRule(ctx, &weirv1.GetRuleRequest{Id: "ok", Consistent: true}); err != nil || r.GetRate() != 1 || r.GetAlgorithm() != "token_bucket" {
		t.Fatalf("get rule (normalized): %v %v", r, err)
	}
	if _, err := rc.GetRule(ctx, &weirv1.GetRuleRequest{Id: "missing"}); status.Code(err) != codes.NotFound {
		t.Fatalf("missing rule: %v", err)
	}
	// An anonymous gRPC write is attributed to the peer address.
	if _, err := rc.DeleteRule(ctx, &weirv1.DeleteRuleRequest{Id: "ok"}); err != nil {
		t.Fatal(err)
	}
	if h, _ := rc.History(ctx, &weirv1.HistoryRequest{Limit: 1}); !strings.HasPrefix(h.GetEntries()[0].GetAuthor(), "grpc:127.0.0.1:") {
		t.Errorf("anonymous author: %v", h)
	}
}

// TestForwardToLeader runs two real Stores in one Raft group: writes sent
// to the follower's HTTP and gRPC front-ends are forwarded to the leader,
// with the admin token passed through (the leader checks it too).
func TestForwardToLeader(t *testing.T) {
	leader := startNode(t, nodeOpts{id: "n1", bootstrap: true, token: "tok"})
	follower := startNode(t, nodeOpts{id: "n2", token: "tok"})
	ctx := ctxT(t)
	err := leader.store.Reconcile(ctx, []rulesraft.Server{{ID: "n1", Addr: leader.store.Addr()}, {ID: "n2", Addr: follower.store.Addr()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "follower knows the leader", func() bool { id, _ := follower.store.Leader(); return id == "n1" })
	testwait.Until(t, "follower caught up", func() bool { return follower.version() == leader.version() && leader.store.IsLeader() })

	// No leader address known yet: not_leader, nothing written.
	if r := follower.do(t, "PUT", "/v1/rules/a", map[string]any{"match": map[string]any{"route": "/a"}, "key": "ip", "rate": 1, "period": "1s"}, "Authorization: Bearer tok"); r.code != 503 || r.errBody(t).Code != CodeNotLeader {
		t.Fatalf("no leader address: %d %s", r.code, r.body)
	}
	follower.b.leader.Store(&leader.grpc)

	// The token is checked on the follower before forwarding.
	if r := follower.do(t, "POST", "/v1/rules:apply", rulesYAML); r.code != 401 {
		t.Fatalf("unauthorized forward: %d %s", r.code, r.body)
	}
	var ap struct {
		Version uint64   `json:"version"`
		Diff    []string `json:"diff"`
	}
	r := follower.do(t, "POST", "/v1/rules:apply", rulesYAML, "Authorization: Bearer tok", "X-Weir-Author: carol")
	r.json(t, &ap)
	if r.code != 200 || ap.Version == 0 || len(ap.Diff) != 2 {
		t.Fatalf("forwarded apply: %d %s", r.code, r.body)
	}
	if leader.version() < ap.Version {
		t.Fatalf("leader at %d after an acknowledged write at %d", leader.version(), ap.Version)
	}
	testwait.Until(t, "replicated to the follower", func() bool { return follower.version() >= ap.Version })
	if h := leader.store.History(1); h[0].Author != "carol" {
		t.Errorf("author lost in forwarding: %+v", h[0])
	}

	// gRPC with metadata, through the follower.
	md := metadata.Pairs("authorization", "Bearer tok")
	rc := weirv1.NewRulesClient(follower.conn)
	resp, err := rc.SetOverride(metadata.NewOutgoingContext(ctx, md), &weirv1.SetOverrideRequest{Override: &weirv1.Override{Key: "ip:1", Rule: "search", Rate: 5}})
	if err != nil || resp.GetVersion() <= ap.Version {
		t.Fatalf("forwarded override: %v %v", resp, err)
	}
	if _, err := rc.DeleteRule(ctx, &weirv1.DeleteRuleRequest{Id: "search"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("gRPC write without token: %v", err)
	}
	// Errors from the leader come back as they are.
	if _, err := rc.DeleteRule(metadata.NewOutgoingContext(ctx, md), &weirv1.DeleteRuleRequest{Id: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("forwarded not found: %v", err)
	}
	// Consistent reads go through the leader.
	set, err := rc.ListRules(ctx, &weirv1.ListRulesRequest{Consistent: true})
	if err != nil || set.GetVersion() != leader.version() || len(set.GetOverrides()) != 1 {
		t.Fatalf("consistent list via follower: %v %v", set, err)
	}
	// A request already forwarded once is not forwarded again.
	fwd := metadata.Pairs("authorization", "Bearer tok", mdForwarded, "1")
	if _, err := rc.DeleteRule(metadata.NewOutgoingContext(ctx, fwd), &weirv1.DeleteRuleRequest{Id: "search"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("double forward: %v", err)
	}
	if _, ok := leader.store.Current().Rule("search"); !ok {
		t.Fatal("rule deleted by a rejected request")
	}
}

func TestStatusMapping(t *testing.T) {
	// A gRPC peer's status (the leader's answer to a forwarded write)
	// becomes an error of its kind: HTTP answers by it, gRPC passes the
	// status on unchanged.
	for _, c := range []struct {
		code   codes.Code
		status int
		name   string
	}{
		{codes.InvalidArgument, 400, CodeInvalidArgument},
		{codes.OutOfRange, 400, CodeInvalidArgument},
		{codes.NotFound, 404, CodeNotFound},
		{codes.Unauthenticated, 401, CodeUnauthorized},
		{codes.PermissionDenied, 401, CodeUnauthorized},
		{codes.Unavailable, 503, CodeUnavailable},
		{codes.DeadlineExceeded, 503, CodeUnavailable},
		{codes.FailedPrecondition, 503, CodeNotLeader},
		{codes.AlreadyExists, 409, CodeConflict},
		{codes.Aborted, 409, CodeConflict},
		{codes.ResourceExhausted, 413, CodeTooLarge},
		{codes.Internal, 500, CodeInternal},
		{codes.Unknown, 500, CodeInternal},
	} {
		err := fromGRPC(status.Error(c.code, "from the leader"))
		if st, name := HTTPStatus(err); st != c.status || name != c.name || err.Error() != "from the leader" {
			t.Errorf("%v -> %d %q (%q), want %d %q", c.code, st, name, err, c.status, c.name)
		}
		if got := status.Convert(GRPCError(fmt.Errorf("forwarding: %w", err))); got.Code() != c.code {
			t.Errorf("%v passed on as %v", c.code, got.Code())
		}
	}
	if st, name := HTTPStatus(nil); st != 200 || name != "" {
		t.Errorf("no error -> %d %q", st, name)
	}

	// Errors of every package, by kind, to both wires.
	for _, c := range []struct {
		err    error
		code   codes.Code
		status int
	}{
		{fmt.Errorf("x: %w", rulesraft.ErrInvalid), codes.InvalidArgument, 400},
		{&rules.ValidationError{Problems: []rules.Problem{{Field: "rate", Msg: "bad"}}}, codes.InvalidArgument, 400},
		{limit.ValidateKey("apikey:\xff"), codes.InvalidArgument, 400},
		{fmt.Errorf("x: %w", rulesraft.ErrNotFound), codes.NotFound, 404},
		{fmt.Errorf("x: %w", rulesraft.ErrVersionGone), codes.NotFound, 404},
		{fmt.Errorf("x: %w", rulesraft.ErrNotLeader), codes.FailedPrecondition, 503},
		{fmt.Errorf("x: %w", rulesraft.ErrTimeout), codes.Unavailable, 503},
		{fmt.Errorf("%w: outcome unknown: %w", rulesraft.ErrTimeout, context.DeadlineExceeded), codes.Unavailable, 503},
		{rulesraft.ErrClosed, codes.Unavailable, 503},
		{fmt.Errorf("%w: no ring yet", limit.Errorf(limit.ErrUnavailable, "node: unavailable")), codes.Unavailable, 503},
		{limit.Errorf(limit.ErrClosed, "node: closed"), codes.Unavailable, 503},
		{limit.Errorf(limit.ErrUnauthenticated, "token"), codes.Unauthenticated, 401},
		{limit.Errorf(limit.ErrTooLarge, "body"), codes.ResourceExhausted, 413},
		{context.DeadlineExceeded, codes.DeadlineExceeded, 503},
		{context.Canceled, codes.Canceled, 503},
		{errors.New("boom"), codes.Internal, 500},
		{status.Error(codes.Aborted, "from a peer"), codes.Aborted, 0}, // passed on as it is (0: HTTP gets such errors through fromGRPC only)
	} {
		got := GRPCError(c.err)
		msg := c.err.Error()
		if st, ok := status.FromError(c.err); ok {
			msg = st.Message()
		}
		if status.Code(got) != c.code || status.Convert(got).Message() != msg {
			t.Errorf("%v -> %v, want %v with the error's message", c.err, got, c.code)
		}
		if st, _ := HTTPStatus(c.err); c.status != 0 && st != c.status {
			t.Errorf("%v -> HTTP %d, want %d", c.err, st, c.status)
		}
	}
	if GRPCError(nil) != nil {
		t.Error("nil error mapped to a status")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := New(Config{}, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("nil backend: %v", err)
	}
	if _, err := New(Config{MaxWait: -1}, &testBackend{}); !errors.Is(err, ErrConfig) {
		t.Errorf("negative MaxWait: %v", err)
	}
}

// A backend that cannot answer (the node has no ring yet, or is shutting
// down) fails a check as a whole with an Unavailable error: HTTP 503
// unavailable, gRPC Unavailable, a CheckStream request error_code
// UNAVAILABLE. Before the kinds were shared, node/api could not see the
// node's sentinels and answered 500 / Internal.
func TestCheckUnavailable(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	ctx := ctxT(t)
	if r := n.do(t, "POST", "/v1/rules:apply", rulesYAML); r.code != 200 {
		t.Fatalf("apply: %d %s", r.code, r.body)
	}
	lc := weirv1.NewLimiterClient(n.conn)
	for _, fail := range []error{
		fmt.Errorf("%w: no ring yet", limit.Errorf(limit.ErrUnavailable, "node: unavailable")), // the node's errUnavailable
		limit.Errorf(limit.ErrClosed, "node: closed"),                                          // node.ErrClosed
	} {
		n.b.checkErr.Store(&fail)
		for _, body := range []string{
			`{"key":"apikey:a","rule":"orders.write"}`,
			`{"items":[{"key":"apikey:a","rule":"orders.write"}]}`,
		} {
			if r := n.do(t, "POST", "/v1/limits/check", body); r.code != 503 || r.errBody(t).Code != CodeUnavailable || !strings.Contains(r.errBody(t).Error, fail.Error()) {
				t.Errorf("%v: HTTP check %s: %d %s", fail, body, r.code, r.body)
			}
		}
		if r := n.do(t, "GET", "/v1/limits/apikey:a", nil); r.code != 503 || r.errBody(t).Code != CodeUnavailable {
			t.Errorf("%v: HTTP limits: %d %s", fail, r.code, r.body)
		}
		_, err := lc.Check(ctx, &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: "apikey:a", Rule: "orders.write", Cost: 1}}})
		if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != fail.Error() {
			t.Errorf("%v: gRPC Check: %v", fail, err)
		}
		if _, err := lc.GetLimits(ctx, &weirv1.GetLimitsRequest{Key: "apikey:a"}); status.Code(err) != codes.Unavailable {
			t.Errorf("%v: gRPC GetLimits: %v", fail, err)
		}
		stream, err := lc.CheckStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&weirv1.CheckStreamRequest{Id: 1, Items: []*weirv1.CheckItem{{Key: "apikey:a", Rule: "orders.write", Cost: 1}}}); err != nil {
			t.Fatal(err)
		}
		if resp, err := stream.Recv(); err != nil || resp.GetErrorCode() != weirv1.ErrorCode_ERROR_CODE_UNAVAILABLE || !strings.HasPrefix(resp.GetError(), "Unavailable") {
			t.Errorf("%v: CheckStream: %v %v", fail, resp, err)
		}
		_ = stream.CloseSend()
	}
	n.b.checkErr.Store(nil)
	if r := n.do(t, "POST", "/v1/limits/check", `{"key":"apikey:a","rule":"orders.write"}`); r.code != 200 {
		t.Fatalf("after recovery: %d %s", r.code, r.body)
	}
}

// TestGRPCCheckDropsCallerOverrides: a per-check limit is set by nodes
// only (the Envoy rate limit service); a Limiter caller's is ignored.
func TestGRPCCheckDropsCallerOverrides(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	ctx := ctxT(t)
	if _, err := weirv1.NewRulesClient(n.conn).ApplyRules(ctx, &weirv1.ApplyRulesRequest{Rules: []*weirv1.Rule{testRule("a", 10)}}); err != nil {
		t.Fatal(err)
	}
	resp, err := weirv1.NewLimiterClient(n.conn).Check(ctx, &weirv1.CheckRequest{Items: []*weirv1.CheckItem{
		{Key: "ip:ov", Rule: "a", Cost: 1, OverrideRate: 1000, OverridePeriodMs: 1000, OverrideBurst: 1000},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResults()[0]; !r.GetAllowed() || r.GetLimit() != 10 || r.GetRemaining() != 9 {
		t.Fatalf("a caller's override was obeyed: %v", r)
	}
}

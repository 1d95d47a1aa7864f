package api

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/weirlimit/weir/proto/weirv1"
)

// TestGRPCCheckStream sends many requests on one stream before reading any
// answer: each is decided exactly as a unary Check, answered under its own
// id, bad items get their own errors, a request Check would reject as a
// whole gets an error response and the stream goes on, and closing the
// send side ends the stream cleanly.
func TestGRPCCheckStream(t *testing.T) {
	n := startNode(t, nodeOpts{bootstrap: true})
	ctx := ctxT(t)
	if _, err := weirv1.NewRulesClient(n.conn).ApplyRules(ctx, &weirv1.ApplyRulesRequest{Rules: []*weirv1.Rule{testRule("a", 10)}}); err != nil {
		t.Fatal(err)
	}
	stream, err := weirv1.NewLimiterClient(n.conn).CheckStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reqs := map[uint64][]*weirv1.CheckItem{
		7: {
			{Key: "ip:1", Rule: "a", Cost: 3},
			{Key: "", Rule: "a", Cost: 1},
			{Key: "ip:1", Rule: "a", Cost: -1},
			{Key: "ip:1", Rule: "zzz", Cost: 1},
		},
		8: make([]*weirv1.CheckItem, MaxItems+1),
		9: {{Key: "ip:3", Rule: "a", Cost: 4}, {Key: "ip:3", Rule: "a", Cost: 0}},
	}
	// Twelve requests of one token each on ip:2 (burst 10).
	for id := uint64(100); id < 112; id++ {
		reqs[id] = []*weirv1.CheckItem{{Key: "ip:2", Rule: "a", Cost: 1}}
	}
	for id, items := range reqs {
		if err := stream.Send(&weirv1.CheckStreamRequest{Id: id, Items: items}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[uint64]*weirv1.CheckStreamResponse{}
	for range reqs {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := reqs[resp.GetId()]; !ok || got[resp.GetId()] != nil {
			t.Fatalf("answer to unknown or repeated id %d", resp.GetId())
		}
		got[resp.GetId()] = resp
	}

	rs := got[7].GetResults()
	if got[7].GetErrorCode() != 0 || len(rs) != 4 || !rs[0].GetAllowed() || rs[0].GetRemaining() != 7 {
		t.Fatalf("request 7: %v", got[7])
	}
	for i, field := range map[int]string{1: "key", 2: "cost"} {
		if rs[i].GetAllowed() || rs[i].GetErrorCode() != weirv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT || !strings.HasPrefix(rs[i].GetError(), field) {
			t.Errorf("request 7 item %d: %v", i, rs[i])
		}
	}
	if rs[3].GetErrorCode() != weirv1.ErrorCode_ERROR_CODE_UNKNOWN_RULE {
		t.Errorf("request 7, unknown rule: %v", rs[3])
	}
	if r := got[8]; r.GetErrorCode() != weirv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT || len(r.GetResults()) != 0 || !strings.Contains(r.GetError(), fmt.Sprint(MaxItems)) {
		t.Errorf("too many items: %v", r)
	}
	if rs := got[9].GetResults(); len(rs) != 2 || !rs[0].GetAllowed() || rs[0].GetRemaining() != 6 || rs[1].GetRemaining() != 6 {
		t.Errorf("request 9: %v", got[9])
	}
	allowed := 0
	for id := uint64(100); id < 112; id++ {
		rs := got[id].GetResults()
		if len(rs) != 1 || rs[0].GetErrorCode() != 0 {
			t.Fatalf("request %d: %v", id, got[id])
		}
		if rs[0].GetAllowed() {
			allowed++
		}
	}
	if allowed != 10 {
		t.Errorf("ip:2: %d of 12 one-token requests allowed; want exactly the burst, 10", allowed)
	}

	// The stream still works after the bad requests, then ends cleanly.
	if err := stream.Send(&weirv1.CheckStreamRequest{Id: 1, Items: []*weirv1.CheckItem{{Key: "ip:1", Rule: "a"}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || resp.GetId() != 1 || len(resp.GetResults()) != 1 || resp.GetResults()[0].GetRemaining() != 7 {
		t.Fatalf("after the bad requests: %v, %v", resp, err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}
}

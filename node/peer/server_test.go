package peer_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/weirlimit/weir/internal/testcluster"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// threeRule allows 3 checks a key, then denies for an hour.
const threeRule = `rules: [{id: three, match: {route: /t, method: GET}, key: apikey, rate: 1, period: 1h, burst: 3}]`

// ForwardStream decides each request as Forward would (burst 3, then
// denied; a malformed item gets its own error), answers with the request's
// id, and the stream goes on after each request until the caller closes it.
func TestForwardStreamAnswersEachRequest(t *testing.T) {
	c := testcluster.New(t, 1)
	c.ApplyRules(threeRule)
	owner, local := c.Nodes[0], "apikey:t1" // alone: the owner of every key

	st, err := testcluster.PeerClient(t, owner.GRPCAddr()).ForwardStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	item := func() *weirv1.CheckItem { return &weirv1.CheckItem{Key: local, Rule: "three", Cost: 1} }
	for _, step := range []struct {
		id    uint64
		items []*weirv1.CheckItem
		want  []string // per item: "allowed", "denied" or an error code
	}{
		{7, []*weirv1.CheckItem{item(), item()}, []string{"allowed", "allowed"}},
		{3, []*weirv1.CheckItem{item(), {Key: "", Rule: "three", Cost: 1}, item()}, []string{"allowed", "ERROR_CODE_INVALID_ARGUMENT", "denied"}},
		{8, []*weirv1.CheckItem{item()}, []string{"denied"}},
	} {
		if err := st.Send(&weirv1.CheckStreamRequest{Id: step.id, Items: step.items}); err != nil {
			t.Fatalf("request %d: send: %v", step.id, err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("request %d: recv: %v", step.id, err)
		}
		if resp.Id != step.id || resp.ErrorCode != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED || len(resp.Results) != len(step.want) {
			t.Fatalf("request %d answered %v", step.id, resp)
		}
		for i, r := range resp.Results {
			got := "denied"
			switch {
			case r.ErrorCode != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED:
				got = r.ErrorCode.String()
			case r.Allowed:
				got = "allowed"
			}
			if got != step.want[i] {
				t.Errorf("request %d item %d: %s (%v), want %s", step.id, i, got, r, step.want[i])
			}
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}
}

// A forwarded request whose decision waits (here for a rule version the
// owner does not reach within the wait) is decided aside: the request sent after it on the
// same stream is answered first.
func TestForwardStreamWaitingRequestAside(t *testing.T) {
	c := testcluster.New(t, 1)
	v := c.ApplyRules(threeRule)
	owner, local := c.Nodes[0], "apikey:t1"

	st, err := testcluster.PeerClient(t, owner.GRPCAddr()).ForwardStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []*weirv1.CheckStreamRequest{
		{Id: 1, Items: []*weirv1.CheckItem{{Key: local, Rule: "three", Cost: 1, RuleVersion: v + 1000}}},
		{Id: 2, Items: []*weirv1.CheckItem{{Key: local, Rule: "three", Cost: 1}}},
	} {
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	var order []uint64
	for range 2 {
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, resp.Id)
		// Both are decided: request 1 by the rules the owner has once
		// the wait is over (its rule exists there).
		if len(resp.Results) != 1 || resp.Results[0].ErrorCode != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
			t.Fatalf("request %d answered %v", resp.Id, resp)
		}
	}
	if order[0] != 2 {
		t.Fatalf("answers in order %v, want request 2 first", order)
	}
	_ = st.CloseSend()
}

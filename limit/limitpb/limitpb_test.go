package limitpb

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/proto/weirv1"
)

// Every field survives proto and back; nil wire entries become zero values.
func TestRoundTrip(t *testing.T) {
	it := limit.Item{Key: "apikey:a", Rule: "r", Cost: 3, RuleVersion: 9, Group: 2, Refund: true, Hops: 1, LeaseGateway: 77}
	var p weirv1.CheckItem
	ItemToProto(&p, &it)
	var bp BatchPool
	back := bp.FromProto([]*weirv1.CheckItem{&p, nil}).Items
	if back[0] != it || back[1] != (limit.Item{}) {
		t.Fatalf("items: %+v, want %+v and a zero item", back, it)
	}
	ov := limit.Item{Key: "rls:d|k=v", Rule: "r", Cost: 1, Override: &limit.Override{Rate: 8, Period: 24 * time.Hour, Burst: 8}}
	ItemToProto(&p, &ov)
	o := bp.FromProto([]*weirv1.CheckItem{&p}).Items[0].Override
	if o == nil || *o != *ov.Override {
		t.Fatalf("override: %+v, want %+v", o, ov.Override)
	}
	ItemToProto(&p, &it) // reusing dst clears the override
	if bp.FromProto([]*weirv1.CheckItem{&p}).Items[0].Override != nil {
		t.Fatal("a reused CheckItem kept an override")
	}
	r := limit.Result{Allowed: false, Remaining: 4, Limit: 10, Reset: 2 * time.Second, RetryAfter: limit.Never,
		Window: time.Minute, Code: limit.CodeUnknownRule, Err: "unknown rule", Shadow: true, Voided: true, LeaseGranted: 6}
	got := ResultsFromProto(append(ResultsToProto([]limit.Result{r}), nil))
	if got[0] != r || got[1] != (limit.Result{}) {
		t.Fatalf("results: %+v, want %+v and a zero result", got, r)
	}
	for _, c := range []limit.ErrorCode{limit.CodeNone, limit.CodeUnknownRule, limit.CodeInvalid, limit.CodeUnavailable} {
		if CodeFromProto(CodeToProto(c)) != c {
			t.Errorf("code %v does not survive a round trip", c)
		}
	}
}

// A pooled batch holds exactly the request's items and as many empty
// results, and gives nothing of an earlier request back.
func TestBatchPool(t *testing.T) {
	var bp BatchPool
	req := []*weirv1.CheckItem{{Key: "a", Rule: "r", Cost: 1}, nil, {Key: "c", Rule: "r"}}
	b := bp.FromProto(req)
	if len(b.Items) != 3 || len(b.Results) != 3 || b.Items[0].Key != "a" || b.Items[1] != (limit.Item{}) || b.Items[2].Key != "c" {
		t.Fatalf("batch: %+v", b)
	}
	b.Results[2] = limit.Result{Allowed: true, Err: "x"}
	items, results := b.Items[:cap(b.Items)], b.Results[:cap(b.Results)]
	bp.Put(b)
	for i := range items {
		if items[i] != (limit.Item{}) || results[i] != (limit.Result{}) {
			t.Errorf("slot %d still holds %+v / %+v after Put", i, items[i], results[i])
		}
	}
	b = bp.FromProto(req[:1])
	if len(b.Items) != 1 || len(b.Results) != 1 || b.Items[0].Key != "a" || b.Results[0] != (limit.Result{}) {
		t.Fatalf("second request: %+v", b)
	}
	bp.Put(b)
}

// A ResultBuf's answers match ResultsToProto's whatever the sizes before
// them, and it reuses its messages once they are large enough.
func TestResultBuf(t *testing.T) {
	var b ResultBuf
	mk := func(n int, base int64) []limit.Result {
		rs := make([]limit.Result, n)
		for i := range rs {
			rs[i] = limit.Result{Allowed: i%2 == 0, Remaining: base + int64(i), Limit: 10, Reset: time.Second}
			if i == 1 {
				rs[i].Code, rs[i].Err = limit.CodeUnknownRule, "unknown rule"
			}
		}
		return rs
	}
	var first *weirv1.CheckResult
	for step, n := range []int{3, 1, 2, 0, 3} {
		rs := mk(n, int64(100*step))
		got, want := b.ToProto(rs), ResultsToProto(rs)
		if len(got) != len(want) {
			t.Fatalf("step %d: %d results, want %d", step, len(got), len(want))
		}
		for i := range got {
			if !proto.Equal(got[i], want[i]) {
				t.Fatalf("step %d result %d: %v, want %v", step, i, got[i], want[i])
			}
		}
		if step == 0 {
			first = got[0]
		} else if n > 0 && got[0] != first {
			t.Fatalf("step %d: a new message for a batch that fits the buffer", step)
		}
	}
	if big := b.ToProto(mk(maxBufResults+1, 0)); len(big) != maxBufResults+1 || big[0] == first {
		t.Fatalf("an oversized batch: %d results, reused %v", len(big), big[0] == first)
	}
}

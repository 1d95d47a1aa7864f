package limitpb

import (
	"testing"
	"time"

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

package limitpb

import (
	"testing"
	"time"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/proto/weirv1"
)

func TestMilliseconds(t *testing.T) {
	for _, c := range []struct {
		d  time.Duration
		ms int64
	}{
		{0, 0}, {-5, 0}, {1, 1}, {time.Millisecond, 1}, {time.Millisecond + 1, 2}, {time.Second, 1000}, {limit.Never, -1},
	} {
		if got := MS(c.d); got != c.ms {
			t.Errorf("MS(%v) = %d, want %d", c.d, got, c.ms)
		}
	}
	for _, ms := range []int64{-1, 0, 1, 999, 86_400_000} {
		if got := MS(Duration(ms)); got != ms {
			t.Errorf("MS(Duration(%d)) = %d: the wire value does not survive a round trip", ms, got)
		}
	}
}

// Every field survives proto and back; nil wire entries become zero values.
func TestRoundTrip(t *testing.T) {
	it := limit.Item{Key: "apikey:a", Rule: "r", Cost: 3, RuleVersion: 9, Group: 2, Refund: true, Hops: 1}
	var p weirv1.CheckItem
	ItemToProto(&p, &it)
	back := ItemsFromProto([]*weirv1.CheckItem{&p, nil})
	if back[0] != it || back[1] != (limit.Item{}) {
		t.Fatalf("items: %+v, want %+v and a zero item", back, it)
	}
	r := limit.Result{Allowed: false, Remaining: 4, Limit: 10, Reset: 2 * time.Second, RetryAfter: limit.Never,
		Window: time.Minute, Code: limit.CodeUnknownRule, Err: "unknown rule", Shadow: true}
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

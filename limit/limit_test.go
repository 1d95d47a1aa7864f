package limit

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestValidateItem(t *testing.T) {
	for _, c := range []struct {
		key, rule string
		cost      int64
		field     string // "" when valid
	}{
		{"apikey:a", "r", 1, ""},
		{"apikey:a", "r", 0, ""},
		{strings.Repeat("k", MaxKeyLen), "r", 1, ""},
		{"apikey:\ufffd", "r", 1, ""}, // valid UTF-8: the replacement character itself
		{"", "r", 1, "key"},
		{strings.Repeat("k", MaxKeyLen+1), "r", 1, "key"},
		{"apikey:\xff", "r", 1, "key"},
		{"apikey:\xfe", "r", 1, "key"},
		{"apikey:\xed\xa0\x80", "r", 1, "key"}, // a UTF-16 surrogate in UTF-8 form
		{"apikey:a", "", 1, "rule"},
		{"apikey:a", "r", -1, "cost"},
	} {
		err := ValidateItem(c.key, c.rule, c.cost)
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%q %q %d: %v, want valid", c.key, c.rule, c.cost, err)
		case c.field != "" && (!errors.Is(err, ErrInvalid) || !strings.HasPrefix(fmt.Sprint(err), c.field+": ")):
			t.Errorf("%q %q %d: %v, want an ErrInvalid naming %s first", c.key, c.rule, c.cost, err, c.field)
		}
	}
}

// Invalid items get their own results and never reach decide; the valid
// ones go in order, and their results land in their places.
func TestDecideValid(t *testing.T) {
	var got [][]Item
	decide := func(items []Item, out []Result) error {
		got = append(got, slices.Clone(items))
		if len(out) != len(items) {
			t.Fatalf("decide got %d results for %d items", len(out), len(items))
		}
		for i, it := range items {
			out[i] = Result{Allowed: true, Remaining: it.Cost}
		}
		return nil
	}
	items := []Item{{Key: "a", Rule: "r", Cost: 1}, {Key: "", Rule: "r", Cost: 2}, {Key: "c", Rule: "r", Cost: 3}, {Key: "d", Rule: "r", Cost: -1}}
	res := make([]Result, len(items))
	if err := DecideValid(items, res, decide); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0]) != 2 || got[0][0].Key != "a" || got[0][1].Key != "c" {
		t.Fatalf("decide got %v, want items a and c", got)
	}
	if !res[0].Allowed || res[0].Remaining != 1 || !res[2].Allowed || res[2].Remaining != 3 {
		t.Errorf("valid results out of place: %+v", res)
	}
	for _, i := range []int{1, 3} {
		if res[i].Allowed || res[i].Code != CodeInvalid || res[i].Err == "" || res[i].RetryAfter != Never {
			t.Errorf("item %d: %+v, want its own invalid result", i, res[i])
		}
	}

	// All valid: decide fills out itself; none valid or no items: no call.
	got = nil
	one := make([]Result, 1)
	if err := DecideValid(items[:1], one, decide); err != nil || !one[0].Allowed || len(got) != 1 {
		t.Fatalf("all valid: %v %v (%d calls)", one, err, len(got))
	}
	got = nil
	one[0] = Result{}
	if err := DecideValid(items[1:2], one, decide); err != nil || one[0].Code != CodeInvalid || len(got) != 0 {
		t.Fatalf("none valid: %v %v (%d calls)", one, err, len(got))
	}
	if err := DecideValid(nil, nil, decide); err != nil || len(got) != 0 {
		t.Fatalf("no items: %v (%d calls)", err, len(got))
	}

	// decide's error, and a results slice of the wrong length, fail the call.
	boom := Errorf(ErrUnavailable, "no ring")
	if err := DecideValid(items, res, func([]Item, []Result) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("decide's error: %v", err)
	}
	if err := DecideValid(items, res[:1], decide); err == nil {
		t.Error("one result slot for four items: no error")
	}
}

func TestErrorf(t *testing.T) {
	sentinel := Errorf(ErrNotFound, "pkg: not found")
	err := fmt.Errorf("%w: rule %q", sentinel, "x")
	if !errors.Is(err, sentinel) || !errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid) {
		t.Fatalf("%v: Is sentinel %v, ErrNotFound %v, ErrInvalid %v", err, errors.Is(err, sentinel), errors.Is(err, ErrNotFound), errors.Is(err, ErrInvalid))
	}
	if err.Error() != `pkg: not found: rule "x"` {
		t.Errorf("message %q: the kind must not show", err.Error())
	}
	inner := errors.New("inner")
	if e := Errorf(ErrInvalid, "outer: %w", inner); !errors.Is(e, inner) || !errors.Is(e, ErrInvalid) {
		t.Errorf("%v does not wrap both", e)
	}
	if !errors.Is(ErrClosed, ErrUnavailable) {
		t.Error("ErrClosed is not ErrUnavailable")
	}
}

func TestMillis(t *testing.T) {
	for _, c := range []struct {
		d  time.Duration
		ms int64
	}{
		{0, 0}, {-5, 0}, {1, 1}, {time.Millisecond, 1}, {time.Millisecond + 1, 2}, {time.Second, 1000}, {Never, -1},
	} {
		if got := Millis(c.d); got != c.ms {
			t.Errorf("Millis(%v) = %d, want %d", c.d, got, c.ms)
		}
	}
	for _, ms := range []int64{-1, 0, 1, 999, 86_400_000} {
		if got := Millis(FromMillis(ms)); got != ms {
			t.Errorf("Millis(FromMillis(%d)) = %d: the wire value does not survive a round trip", ms, got)
		}
	}
}

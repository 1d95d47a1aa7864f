package client

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/weirlimit/weir/proto/weirv1"
)

func TestCheckKeyExact(t *testing.T) {
	_, cl := startWith(t, nil)
	ctx := context.Background()
	check := func(key string, cost int64, ids ...string) Decision {
		t.Helper()
		d, err := cl.CheckKey(ctx, key, cost, ids...)
		if err != nil {
			t.Fatalf("CheckKey(%q, %d, %v): %v", key, cost, ids, err)
		}
		return d
	}
	// exact: burst 3, 1 per hour.
	for i, want := range []int64{2, 1, 0} {
		d := check("k1", 1, "exact")
		if !d.Allowed || d.Status != http.StatusOK || len(d.Limits) != 1 {
			t.Fatalf("check %d: %+v", i+1, d)
		}
		l := d.Limits[0]
		if l.Rule != "exact" || l.Key != "k1" || l.Limit != 3 || l.Remaining != want || l.Fallback {
			t.Errorf("check %d: %+v, want remaining %d from the cluster", i+1, l, want)
		}
	}
	d := check("k1", 1, "exact")
	if d.Allowed || d.Status != http.StatusTooManyRequests || d.RetryAfter <= 0 || d.Policy == nil || d.Policy.Rule != "exact" {
		t.Errorf("check 4: %+v, want 429 with a retry-after", d)
	}

	// Cost: 2 of 3, then 2 more is too many, yet 1 still passes (a denial
	// at cost 2 does not block cost 1 in the blocked-until cache).
	if d := check("k3", 2, "exact"); !d.Allowed || d.Limits[0].Remaining != 1 {
		t.Errorf("cost 2: %+v", d)
	}
	if d := check("k3", 2, "exact"); d.Allowed || d.Status != http.StatusTooManyRequests {
		t.Errorf("cost 2 with 1 left: %+v", d)
	}
	if d := check("k3", 1, "exact"); !d.Allowed || d.Limits[0].Remaining != 0 {
		t.Errorf("cost 1 with 1 left, after a cost-2 denial: %+v", d)
	}
	// A cost above the burst never passes and does not block small costs.
	if d := check("k5", 100, "exact"); d.Allowed {
		t.Errorf("cost 100 over burst 3: %+v", d)
	}
	if d := check("k5", 1, "exact"); !d.Allowed || d.Limits[0].Remaining != 2 {
		t.Errorf("cost 1 after a cost-100 denial: %+v", d)
	}

	// Several rules: all or nothing. exact (burst 3) runs out first; openr
	// (burst 4) is charged only for the three that passed.
	for i := 0; i < 3; i++ {
		if d := check("k4", 1, "exact", "openr"); !d.Allowed || len(d.Limits) != 2 {
			t.Fatalf("pair %d: %+v", i+1, d)
		}
	}
	if d := check("k4", 1, "exact", "openr"); d.Allowed || d.Policy == nil || d.Policy.Rule != "exact" {
		t.Errorf("pair 4: %+v, want denied by exact", d)
	}
	if d := check("k4", 1, "openr"); !d.Allowed || d.Limits[0].Remaining != 0 {
		t.Errorf("openr after the denied pair: %+v, want allowed with 0 left", d)
	}
	// The longest key passes as is.
	long := strings.Repeat("k", MaxKeyLen)
	if d := check(long, 1, "exact"); !d.Allowed || d.Limits[0].Key != long || d.Limits[0].Remaining != 2 {
		t.Errorf("key of MaxKeyLen bytes: allowed %v, remaining %d", d.Allowed, d.Limits[0].Remaining)
	}
}

func TestCheckKeyBadInputDecidesNothing(t *testing.T) {
	_, cl := startWith(t, nil)
	ctx := context.Background()
	rpcs := cl.Stats().RPCs
	for _, tc := range []struct {
		name string
		key  string
		cost int64
		ids  []string
		want error
	}{
		{"no rule", "k2", 1, nil, ErrUnknownRule},
		{"unknown rule", "k2", 1, []string{"nope"}, ErrUnknownRule},
		{"known then unknown rule", "k2", 1, []string{"exact", "nope"}, ErrUnknownRule},
		{"rule named twice", "k2", 1, []string{"exact", "exact"}, ErrInvalidCheck},
		{"empty key", "", 1, []string{"exact"}, ErrInvalidCheck},
		{"oversized key", strings.Repeat("k", MaxKeyLen+1), 1, []string{"exact"}, ErrInvalidCheck},
		{"key not UTF-8", "k2\xff", 1, []string{"exact"}, ErrInvalidCheck},
		{"zero cost", "k2", 0, []string{"exact"}, ErrInvalidCheck},
		{"negative cost", "k2", -1, []string{"exact"}, ErrInvalidCheck},
	} {
		d, err := cl.CheckKey(ctx, tc.key, tc.cost, tc.ids...)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
		if d.Allowed || len(d.Limits) != 0 {
			t.Errorf("%s: a decision came back with the error: %+v", tc.name, d)
		}
	}
	if got := cl.Stats().RPCs - rpcs; got != 0 {
		t.Errorf("%d RPCs for bad input, want 0", got)
	}
	// Nothing was taken: the first real check sees the full bucket.
	d, err := cl.CheckKey(ctx, "k2", 1, "exact")
	if err != nil || !d.Allowed || d.Limits[0].Remaining != 2 {
		t.Errorf("after bad input: %+v, %v; want allowed with 2 of 3 left", d, err)
	}
}

func TestCheckKeyNotReady(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Cluster, cfg.GatewayID = []string{"127.0.0.1:1"}, "g"
	cl, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	d, err := cl.CheckKey(context.Background(), "k", 1, "exact")
	if !errors.Is(err, ErrNotReady) || d.Allowed || d.Status != 0 {
		t.Errorf("before rules: %+v, %v; want ErrNotReady", d, err)
	}
	if s := cl.Stats(); s.RPCs != 0 || s.Fallbacks != 0 {
		t.Errorf("before rules: stats %+v, want nothing sent or decided", s)
	}
}

// The SDK reads voided off the wire (the group contract): a voided rule
// passed on its own, so it neither blocks its key nor leases tokens; a
// denial with retry_after_ms 0 and no voided is a denial, not the old
// inference of a voided rule (which the wire never promised).
func TestAnswerReadsVoided(t *testing.T) {
	_, cl := startWith(t, nil)
	rs := cl.rules.Load()
	now := cl.now()
	for _, id := range []string{"hdr", "leased"} {
		rule, ok := rs.m.Rule(id)
		if !ok {
			t.Fatalf("no rule %s", id)
		}
		p := pending{rule: rule, key: "apikey:v", id: ruleKey{id, "apikey:v"}, grab: rule.Lease > 0}
		cl.answer(rs, &p, &weirv1.CheckResult{Allowed: false, Voided: true, Remaining: 2, Limit: 3}, 1, now)
		if !p.done || !p.lim.Allowed {
			t.Errorf("%s voided: %+v, want counted as passed", id, p.lim)
		}
		if _, blocked := cl.local.blockedDecision([]pending{p}, 1, now); blocked {
			t.Errorf("%s voided: the key got blocked", id)
		}
		if _, ok := cl.local.takeLease(p.id, 1, now); ok {
			t.Errorf("%s voided: a lease was granted", id)
		}
		q := pending{rule: rule, key: "apikey:w", id: ruleKey{id, "apikey:w"}}
		cl.answer(rs, &q, &weirv1.CheckResult{Allowed: false, RetryAfterMs: 0, Limit: 3}, 1, now)
		if q.lim.Allowed {
			t.Errorf("%s: allowed=false, retry 0, not voided counted as passed", id)
		}
	}
}

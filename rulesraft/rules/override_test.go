package rules

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestOverrideValidate(t *testing.T) {
	ok := Override{Key: "apikey:ak_42", Rule: "orders.write", Rate: 100}
	tests := []struct {
		name  string
		edit  func(*Override)
		field string // "" means valid
		msg   string
	}{
		{"valid", func(*Override) {}, "", ""},
		{"valid block", func(o *Override) { o.Rate, o.Block = 0, true }, "", ""},
		{"valid burst", func(o *Override) { o.Burst = 500 }, "", ""},
		{"valid long key", func(o *Override) { o.Key = strings.Repeat("k", MaxOverrideKeyLen) }, "", ""},
		{"empty key", func(o *Override) { o.Key = "" }, "key", "must not be empty"},
		{"long key", func(o *Override) { o.Key = strings.Repeat("k", MaxOverrideKeyLen+1) }, "key", "at most 256"},
		{"empty rule", func(o *Override) { o.Rule = "" }, "rule", "must not be empty"},
		{"bad rule", func(o *Override) { o.Rule = "a b" }, "rule", "may hold only"},
		{"no rate no block", func(o *Override) { o.Rate = 0 }, "rate", "must be > 0"},
		{"negative rate", func(o *Override) { o.Rate = -5 }, "rate", "must be > 0"},
		{"block with rate", func(o *Override) { o.Block = true }, "rate", "must be absent when block"},
		{"negative burst", func(o *Override) { o.Burst = -1 }, "burst", "must be >= 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok
			tt.edit(&o)
			err := o.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) || len(ve.Problems) != 1 {
				t.Fatalf("Validate = %v, want one problem", err)
			}
			if p := ve.Problems[0]; p.Field != tt.field || !strings.Contains(p.Msg, tt.msg) {
				t.Fatalf("problem = %+v, want %s: ...%s...", p, tt.field, tt.msg)
			}
		})
	}
}

func TestOverrideValidateFor(t *testing.T) {
	r := validRule()
	r.Algorithm, r.Rate, r.Burst = AlgSlidingLog, 100, 0
	if err := (Override{Key: "k", Rule: r.ID, Rate: MaxLogLimit}).ValidateFor(r); err != nil {
		t.Fatalf("ValidateFor(at cap) = %v", err)
	}
	if err := (Override{Key: "k", Rule: r.ID, Rate: MaxLogLimit + 1}).ValidateFor(r); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ValidateFor(over sliding_log cap) = %v, want ErrInvalid", err)
	}
	if err := (Override{Key: "k", Rule: "other", Rate: 1}).ValidateFor(r); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ValidateFor(other rule) = %v, want ErrInvalid", err)
	}
	if err := (Override{Key: "k", Rule: r.ID, Block: true}).ValidateFor(r); err != nil {
		t.Fatalf("ValidateFor(block) = %v", err)
	}
}

func TestOverrideActive(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	forever := Override{Key: "k", Rule: "r", Rate: 1}
	until := Override{Key: "k", Rule: "r", Rate: 1, ExpiresAt: t0}
	steps := []struct {
		now           time.Time
		forever, till bool
	}{
		{time.Time{}, true, true},
		{t0.Add(-time.Hour), true, true},
		{t0.Add(-time.Nanosecond), true, true},
		{t0, true, false},
		{t0.Add(time.Nanosecond), true, false},
		{t0.AddDate(10, 0, 0), true, false},
	}
	for _, s := range steps {
		if got := forever.Active(s.now); got != s.forever {
			t.Errorf("forever.Active(%v) = %v", s.now, got)
		}
		if got := until.Active(s.now); got != s.till {
			t.Errorf("until.Active(%v) = %v, want %v", s.now, got, s.till)
		}
	}
}

func TestEffective(t *testing.T) {
	r := validRule() // 10/s burst 20
	base := r.Limit()
	tests := []struct {
		name        string
		o           *Override
		rate, burst int64
		blocked     bool
	}{
		{"none", nil, 10, 20, false},
		{"raised", &Override{Rate: 100, Burst: 500}, 100, 500, false},
		{"burst defaults to override rate", &Override{Rate: 100}, 100, 100, false},
		{"lowered", &Override{Rate: 1, Burst: 1}, 1, 1, false},
		{"block", &Override{Block: true}, 10, 20, true},
	}
	for _, tt := range tests {
		lim, blocked := Effective(&r, tt.o)
		if lim.Rate != tt.rate || lim.Burst != tt.burst || blocked != tt.blocked {
			t.Errorf("%s: Effective = %+v, %v; want rate %d burst %d blocked %v", tt.name, lim, blocked, tt.rate, tt.burst, tt.blocked)
		}
		if lim.Period != base.Period || lim.Algorithm != base.Algorithm {
			t.Errorf("%s: period/algorithm changed: %+v vs %+v", tt.name, lim, base)
		}
	}
}

package bucket

import (
	"errors"
	"testing"
	"time"
)

func TestParseAlgorithm(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Algorithm
	}{
		{"", TokenBucket},
		{"token_bucket", TokenBucket},
		{"leaky_bucket", LeakyBucket},
		{"fixed_window", FixedWindow},
		{"sliding_window", SlidingWindow},
		{"sliding_log", SlidingLog},
	} {
		got, err := ParseAlgorithm(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if tc.in != "" && got.String() != tc.in {
			t.Errorf("%v.String() = %q", got, got.String())
		}
		var a Algorithm
		if b, err := tc.want.MarshalText(); err != nil || a.UnmarshalText(b) != nil || a != tc.want {
			t.Errorf("text round trip of %v: %q, %v -> %v", tc.want, b, err, a)
		}
	}
	for _, bad := range []string{"Token_Bucket", "gcra", " token_bucket"} {
		if _, err := ParseAlgorithm(bad); !errors.Is(err, ErrUnknownAlgorithm) {
			t.Errorf("ParseAlgorithm(%q) error %v, want ErrUnknownAlgorithm", bad, err)
		}
	}
	if s := Algorithm(9).String(); s != "algorithm(9)" {
		t.Errorf("String of unknown = %q", s)
	}
	if _, err := Algorithm(9).MarshalText(); !errors.Is(err, ErrUnknownAlgorithm) {
		t.Errorf("MarshalText of unknown: %v", err)
	}
}

func TestValidate(t *testing.T) {
	year := 365 * 24 * time.Hour
	ok := []Limit{
		{Rate: 10, Period: time.Second, Burst: 20},
		{Algorithm: LeakyBucket, Rate: 1, Period: time.Nanosecond},
		{Algorithm: FixedWindow, Rate: 1000, Period: 24 * time.Hour, Burst: 5},
		{Algorithm: SlidingWindow, Rate: 1e9, Period: year},
		{Algorithm: SlidingLog, Rate: 100, Period: 30 * time.Second},
		{Rate: 1e9, Period: year, Burst: 1e9},
		{Rate: MaxTokens, Period: time.Second},
	}
	for _, l := range ok {
		if err := l.Validate(100); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
	bad := []struct {
		l   Limit
		log bool
	}{
		{l: Limit{Rate: 0, Period: time.Second}},
		{l: Limit{Rate: -1, Period: time.Second}},
		{l: Limit{Rate: 1, Period: 0}},
		{l: Limit{Rate: 1, Period: -time.Second}},
		{l: Limit{Rate: 1, Period: time.Second, Burst: -1}},
		{l: Limit{Algorithm: Concurrency + 1, Rate: 1, Period: time.Second}},
		{l: Limit{Algorithm: Concurrency, Rate: 101, Period: time.Second}, log: true},
		{l: Limit{Rate: MaxTokens + 1, Period: time.Second}},
		{l: Limit{Rate: 1, Period: time.Second, Burst: MaxTokens + 1}},
		{l: Limit{Rate: 1, Period: year, Burst: 1000}}, // a thousand years to refill
		{l: Limit{Algorithm: SlidingWindow, Rate: 1, Period: MaxIdle}},
		{l: Limit{Algorithm: SlidingLog, Rate: 101, Period: time.Second}, log: true},
	}
	for _, tc := range bad {
		err := tc.l.Validate(100)
		if !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%+v: error %v, want ErrInvalidLimit", tc.l, err)
		}
		if errors.Is(err, ErrLogTooLarge) != tc.log {
			t.Errorf("%+v: error %v, ErrLogTooLarge %v", tc.l, err, tc.log)
		}
	}
}

func TestCapacityAndIdleAfter(t *testing.T) {
	for _, tc := range []struct {
		l        Limit
		capacity int64
		idle     time.Duration
	}{
		{Limit{Rate: 10, Period: time.Second}, 10, time.Second},
		{Limit{Rate: 10, Period: time.Second, Burst: 25}, 25, 2500 * time.Millisecond},
		{Limit{Algorithm: LeakyBucket, Rate: 3, Period: time.Second, Burst: 1}, 1, 333_333_334},
		{Limit{Algorithm: FixedWindow, Rate: 10, Period: time.Minute, Burst: 99}, 10, time.Minute},
		{Limit{Algorithm: SlidingWindow, Rate: 10, Period: time.Minute, Burst: 99}, 10, 2 * time.Minute},
		{Limit{Algorithm: SlidingLog, Rate: 10, Period: time.Minute, Burst: 99}, 10, time.Minute},
		{Limit{Rate: 0, Period: time.Minute}, 0, 0},
	} {
		if got := tc.l.Capacity(); got != tc.capacity {
			t.Errorf("%+v: Capacity %d, want %d", tc.l, got, tc.capacity)
		}
		if got := tc.l.IdleAfter(); got != tc.idle {
			t.Errorf("%+v: IdleAfter %v, want %v", tc.l, got, tc.idle)
		}
	}
}

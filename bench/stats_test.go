package bench

import (
	"errors"
	"math"
	"testing"
	"time"
)

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	ten := ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"one sample, any q", ms(7), 0.99, 7 * time.Millisecond},
		{"q=0 is the minimum", ten, 0, 1 * time.Millisecond},
		{"q=1 is the maximum", ten, 1, 10 * time.Millisecond},
		{"median of ten is the 5th", ten, 0.5, 5 * time.Millisecond},
		{"p90 of ten is the 9th", ten, 0.9, 9 * time.Millisecond},
		{"p91 of ten rounds up to the 10th", ten, 0.91, 10 * time.Millisecond},
		{"p99 of 100", hundred, 0.99, 99 * time.Millisecond},
		{"p99.9 of 100 is the max", hundred, 0.999, 100 * time.Millisecond},
		{"p50 of 100", hundred, 0.5, 50 * time.Millisecond},
		{"p1 of 100", hundred, 0.01, 1 * time.Millisecond},
		{"duplicates", ms(1, 1, 1, 5), 0.75, 1 * time.Millisecond},
	} {
		got, err := Percentile(tc.sorted, tc.q)
		if err != nil || got != tc.want {
			t.Errorf("%s: Percentile(q=%v) = %v, %v; want %v", tc.name, tc.q, got, err, tc.want)
		}
	}
}

func TestPercentileBadInput(t *testing.T) {
	for _, tc := range []struct {
		s []time.Duration
		q float64
	}{{nil, 0.5}, {ms(1), -0.1}, {ms(1), 1.01}, {ms(1), math.NaN()}} {
		if _, err := Percentile(tc.s, tc.q); !errors.Is(err, ErrInput) {
			t.Errorf("Percentile(%v, %v) err = %v, want ErrInput", tc.s, tc.q, err)
		}
	}
}

// Against a reference: for every q, at least q·n samples are ≤ the answer
// and fewer than q·n are strictly below it.
func TestPercentileProperty(t *testing.T) {
	s := make([]time.Duration, 0, 1000)
	for i := 0; i < 1000; i++ {
		s = append(s, time.Duration((i*7919)%997)*time.Microsecond)
	}
	l := Summarize(s) // sorts s
	for i := 1; i < len(s); i++ {
		if s[i] < s[i-1] {
			t.Fatal("Summarize did not sort")
		}
	}
	if l.N != 1000 || l.Max != s[999] || !(l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Fatalf("summary not monotone: %+v", l)
	}
	for q := 0.001; q <= 1; q += 0.013 {
		p, _ := Percentile(s, q)
		le, lt := 0, 0
		for _, v := range s {
			if v <= p {
				le++
			}
			if v < p {
				lt++
			}
		}
		need := q * float64(len(s))
		if float64(le) < need-1e-9 || float64(lt) >= need+1e-9 {
			t.Fatalf("q=%v: p=%v has %d ≤ and %d <; need ≥ %v and < %v", q, p, le, lt, need, need)
		}
	}
	if (Summarize(nil) != Latencies{}) {
		t.Fatal("empty summary not zero")
	}
}

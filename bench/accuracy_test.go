package bench

import (
	"errors"
	"math"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestIdeal(t *testing.T) {
	for _, tc := range []struct {
		burst, rate     int64
		period, elapsed time.Duration
		want            float64
	}{
		{100, 1000, time.Second, 10 * time.Second, 10100},
		{100, 1000, time.Second, 0, 100},
		{10, 60, time.Minute, 30 * time.Second, 40},
		{5, 1, time.Hour, 1800 * time.Second, 5.5},
		{0, 10, time.Second, 2500 * time.Millisecond, 25},
	} {
		got, err := Ideal(tc.burst, tc.rate, tc.period, tc.elapsed)
		if err != nil || !near(got, tc.want) {
			t.Errorf("Ideal(%d, %d, %v, %v) = %v, %v; want %v", tc.burst, tc.rate, tc.period, tc.elapsed, got, err, tc.want)
		}
	}
	if _, err := Ideal(1, 1, 0, time.Second); !errors.Is(err, ErrInput) {
		t.Errorf("zero period: err = %v", err)
	}
	if _, err := Ideal(-1, 1, time.Second, time.Second); !errors.Is(err, ErrInput) {
		t.Errorf("negative burst: err = %v", err)
	}
}

func TestDeviation(t *testing.T) {
	for _, tc := range []struct {
		admitted int64
		ideal    float64
		want     float64
	}{
		{10100, 10100, 0},
		{10201, 10100, 1},  // over-admission
		{9090, 10100, -10}, // under-admission
		{0, 50, -100},      // nothing admitted
		{150, 100, 50},
	} {
		got, err := Deviation(tc.admitted, tc.ideal)
		if err != nil || !near(got, tc.want) {
			t.Errorf("Deviation(%d, %v) = %v, %v; want %v", tc.admitted, tc.ideal, got, err, tc.want)
		}
	}
	if _, err := Deviation(1, 0); !errors.Is(err, ErrInput) {
		t.Errorf("zero ideal: err = %v", err)
	}
}

func TestFairness(t *testing.T) {
	for _, tc := range []struct {
		per  []int64
		want float64
	}{
		{[]int64{25, 25, 25, 25}, 0},
		{[]int64{30, 20, 25, 25}, 20},  // equal 25: 30 is +20%, 20 is −20%
		{[]int64{100, 0}, 100},         // one gateway starved
		{[]int64{70, 10, 10, 10}, 180}, // the owner's own gateway wins
		{[]int64{7}, 0},
	} {
		got, err := Fairness(tc.per)
		if err != nil || !near(got, tc.want) {
			t.Errorf("Fairness(%v) = %v, %v; want %v", tc.per, got, err, tc.want)
		}
	}
	for _, bad := range [][]int64{nil, {0, 0}, {-1, 3}} {
		if _, err := Fairness(bad); !errors.Is(err, ErrInput) {
			t.Errorf("Fairness(%v) err = %v, want ErrInput", bad, err)
		}
	}
}

// The accuracy summary of a run: per-key admitted summed over callers,
// fairness per key over gateways (caller w is gateway w % G).
func TestAccuracySummary(t *testing.T) {
	sc := Scenario{Name: "acc", Rules: []RuleSpec{{ID: "r", Rate: 10, Period: time.Second, Burst: 10}}, Keys: 2, Cost: 1, Accuracy: true}
	cfg := Config{Gateways: 2}
	callers := []*caller{
		{perKey: []int64{30, 60}}, // gateway 0
		{perKey: []int64{30, 40}}, // gateway 1
	}
	a, err := accuracy(cfg, sc, callers, 5*time.Second) // ideal 10 + 50 = 60
	if err != nil {
		t.Fatal(err)
	}
	if !near(a.Ideal, 60) || a.Admitted[0] != 60 || a.Admitted[1] != 100 {
		t.Fatalf("ideal %v admitted %v", a.Ideal, a.Admitted)
	}
	if !near(a.Deviation[0], 0) || !near(a.WorstDeviation, 100*40.0/60) {
		t.Fatalf("deviation %v worst %v", a.Deviation, a.WorstDeviation)
	}
	if !near(a.Fairness, 20) { // key 1: 60 vs 40 around 50
		t.Fatalf("fairness %v, want 20", a.Fairness)
	}
}

// The ideal counts refill up to the last check sent, not through the tail
// in which late answers arrive: a run of 10s whose last answer came at 12s
// still has the ideal of 10s.
func TestAccuracyWindowEndsAtLastSend(t *testing.T) {
	sc := Scenario{Name: "acc", Rules: []RuleSpec{{ID: "r", Rate: 10, Period: time.Second, Burst: 10}}, Keys: 1, Cost: 1, Accuracy: true}
	callers := []*caller{
		{perKey: []int64{110}, lastSent: 10 * time.Second},
		{perKey: []int64{0}, lastSent: 9 * time.Second},
	}
	a, err := accuracy(Config{Gateways: 1}, sc, callers, 12*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !near(a.Ideal, 110) || !near(a.Deviation[0], 0) {
		t.Fatalf("ideal %v deviation %v, want 110 and 0", a.Ideal, a.Deviation)
	}
}

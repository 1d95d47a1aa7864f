package bucket

import (
	"testing"
	"time"
)

// Each benchmark drives one counter with requests at twice its rate, so
// about half are denied; the clock advances by Period/(2×Rate) per call.
func BenchmarkDecide(b *testing.B) {
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindow} {
		b.Run(alg.String(), func(b *testing.B) {
			l := Limit{Algorithm: alg, Rate: 1000, Period: time.Second, Burst: 50}
			benchDecide(b, l, int64(l.Period)/(2*l.Rate))
		})
	}
}

// benchDecide drives one counter of l, the clock advancing step per call.
func benchDecide(b *testing.B, l Limit, step int64) {
	var s State
	now := t0
	allowed := 0
	b.ReportAllocs()
	for b.Loop() {
		var res Result
		s, res = Decide(s, l, 1, now)
		if res.Allowed {
			allowed++
		}
		now += step
	}
	if allowed == 0 {
		b.Fatal("nothing allowed")
	}
}

func BenchmarkDecideLog(b *testing.B) {
	l := Limit{Algorithm: SlidingLog, Rate: 100, Period: time.Second}
	step := int64(l.Period) / (2 * l.Rate)
	log := make([]int64, 0, l.Rate)
	now := t0
	allowed := 0
	b.ReportAllocs()
	for b.Loop() {
		var res Result
		log, res = DecideLog(log, l, 1, now)
		if res.Allowed {
			allowed++
		}
		now += step
	}
	if allowed == 0 {
		b.Fatal("nothing allowed")
	}
}

// BenchmarkDecideCalendar is FixedWindow with calendar days in a zone: the
// same window most calls (as a plain window), a boundary computed from the
// zone when one rolls (every 100 calls here, far more often than a day).
func BenchmarkDecideCalendar(b *testing.B) {
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		b.Skip(err)
	}
	l := Limit{Algorithm: FixedWindow, Rate: 50, Period: Day.Nominal(), Calendar: &Calendar{Unit: Day, Zone: loc}}
	benchDecide(b, l, int64(24*time.Hour)/100)
}

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
			step := int64(l.Period) / (2 * l.Rate)
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
		})
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

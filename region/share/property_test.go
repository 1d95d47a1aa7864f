package share

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPropertyBound drives three and five regions through random demand,
// cuts (symmetric and one-way), isolations and heals, and checks after
// every step that the shares add up to at most Whole (the hard invariant).
// After a final heal with steady demand it measures how much share the run
// lost for good (grants voided by a region that declared the giver lost,
// surrenders no majority claimed and the region could not restore): the
// median key must keep at least 90% (logged: the distribution).
func TestPropertyBound(t *testing.T) {
	var sums []int64
	for seed := uint64(1); seed <= 24; seed++ {
		names := []string{"a", "b", "c"}
		if seed%4 == 0 {
			names = []string{"a", "b", "c", "d", "e"}
		}
		rng := rand.New(rand.NewPCG(seed, seed*7))
		s := newSim(t, names...)
		n := len(names)
		keys := []string{keyHomedAt(0, n), keyHomedAt(1, n), keyHomedAt(n-1, n)}
		demand := make([]int64, n)
		for step := 0; step < 300; step++ {
			switch rng.IntN(20) {
			case 0:
				i, j := rng.IntN(n), rng.IntN(n)
				if i != j {
					s.cutLink(i, j, rng.IntN(2) == 0)
				}
			case 1:
				s.isolate(rng.IntN(n), rng.IntN(3) == 0)
			case 2:
				i, j := rng.IntN(n), rng.IntN(n)
				s.oneWay[i][j] = rng.IntN(2) == 0
			case 3, 4:
				demand[rng.IntN(n)] = int64(rng.IntN(4) * 100)
			}
			for _, key := range keys {
				s.step(key, demand) // check() asserts the bound
			}
		}
		for i := range s.cut {
			clear(s.cut[i])
			clear(s.oneWay[i])
		}
		for i := range demand {
			demand[i] = 100
		}
		for range 60 {
			for _, key := range keys {
				s.step(key, demand)
			}
		}
		for _, key := range keys {
			sums = append(sums, s.sum(key))
		}
	}
	slices.Sort(sums)
	t.Logf("after heal, sum of shares per key (min, p10, median): %d, %d, %d of %d", sums[0], sums[len(sums)/10], sums[len(sums)/2], Whole)
	if sums[len(sums)/2] < Whole*9/10 {
		t.Fatalf("median key keeps %d < 90%% of Whole after heal", sums[len(sums)/2])
	}
}

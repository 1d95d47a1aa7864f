package share

import (
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
)

// TestPropertyBound drives three, four and five regions through random demand,
// cuts (symmetric and one-way), isolations and heals, late deliveries of
// exchanges up to 20 s old to regions without the key, requests and
// answers up to 1 s (an exchange's deadline) late to regions holding it
// (in three seeds of four after every step: a slow network), and quiet
// spells in which keys whose share
// moved are reset to a new generation and dropped, and checks after every
// step (and every late delivery) that the shares add up to at most Whole
// (the hard invariant).
// After a final heal with steady demand it measures how much share the run
// lost for good (grants voided by a region that declared the giver lost,
// surrenders no majority claimed and the region could not restore): the
// median key must keep at least 90% (logged: the distribution).
// WEIR_PROPERTY_SEEDS=N runs seeds 1..N instead (the hunt for a hostile
// schedule: 1,000 seeds, a quarter of them with five regions, pass).
var propertyFirst, propertySeeds uint64 = 1, 24

func TestPropertyBound(t *testing.T) {
	if v, err := strconv.ParseUint(os.Getenv("WEIR_PROPERTY_SEEDS"), 10, 64); err == nil && v > 0 {
		propertySeeds = v
	}
	if v, err := strconv.ParseUint(os.Getenv("WEIR_PROPERTY_FIRST"), 10, 64); err == nil && v > 0 {
		propertyFirst = v // with WEIR_PROPERTY_SEEDS: rerun one seed
	}
	var sums []int64
	var resets int64
	replays, lates := 0, 0
	worst := 0 // steps after the final heal until every key is whole again
	for seed := propertyFirst; seed <= propertySeeds; seed++ {
		names := []string{"a", "b", "c"}
		switch seed % 4 {
		case 0: // beyond MaxRegions: studied, not shipped
			names = []string{"a", "b", "c", "d", "e"}
		case 2: // MaxRegions
			names = []string{"a", "b", "c", "d"}
		}
		rng := rand.New(rand.NewPCG(seed, seed*7))
		s := newSim(t, names...)
		s.seed = seed
		n := len(names)
		keys := []string{keyHomedAt(0, n), keyHomedAt(1, n), keyHomedAt(n-1, n)}
		demand := make([]int64, n)
		quiet := 0 // steps left in a quiet spell: no region asks
		// slow: late deliveries within an exchange's deadline after
		// every step (a slow network), on top of the occasional ones.
		slow := rng.IntN(4)
		for step := 0; step < 400; step++ {
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
			case 5:
				// Long enough for a reset (IdleAfter, 20 steps, then a
				// round or two to cap and switch) in some spells.
				quiet = 20 + rng.IntN(50)
			case 6, 7:
				s.replay(rng.IntN(n), rng.IntN(n), 1+rng.IntN(keepSent))
			case 8, 9, 10:
				// Within an exchange's deadline, into regions that hold
				// the key: a slow or retried request.
				s.replay(rng.IntN(n), rng.IntN(n), 1+rng.IntN(lateHeld))
			case 11, 12:
				s.lateAnswer(rng.IntN(n), rng.IntN(n), 1+rng.IntN(lateHeld))
			}
			asked := demand
			if quiet > 0 {
				quiet--
				asked = make([]int64, n)
			}
			for _, key := range keys {
				s.step(key, asked) // check() asserts the bound
				for range slow {
					i, j, back := rng.IntN(n), rng.IntN(n), 1+rng.IntN(lateHeld)
					if rng.IntN(2) == 0 {
						s.replay(i, j, back)
					} else {
						s.lateAnswer(i, j, back)
					}
				}
			}
		}
		for _, tab := range s.tabs {
			resets += tab.Resets()
		}
		replays += s.replays
		lates += s.lateHeld
		for i := range s.cut {
			clear(s.cut[i])
			clear(s.oneWay[i])
		}
		for i := range demand {
			demand[i] = 100
		}
		// Count the steps until every key's shares add up to Whole
		// again (less 0.1%: grants in flight) for good.
		healed := 0
		for step := 1; step <= 60; step++ {
			for _, key := range keys {
				s.step(key, demand)
				if s.sum(key) < Whole-Whole/1000 {
					healed = step + 1
				}
			}
		}
		worst = max(worst, healed)
		for _, key := range keys {
			sums = append(sums, s.sum(key))
		}
	}
	slices.Sort(sums)
	t.Logf("after heal, sum of shares per key (min, p10, median): %d, %d, %d of %d; whole again (±0.1%%) %d steps after the heal at worst; %d resets (a key moved to a new generation in one region), %d late batches to regions without the key, %d to regions holding it",
		sums[0], sums[len(sums)/10], sums[len(sums)/2], Whole, worst, resets, replays, lates)
	if resets == 0 || replays == 0 || lates == 0 {
		t.Errorf("no key was reset or no late batch delivered: the schedules do not test resets")
	}
	if worst > 12 {
		t.Fatalf("a key's shares added up to less than Whole (-0.1%%) %d steps after the heal, want within 12 (3 s)", worst)
	}
}

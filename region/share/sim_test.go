package share

import (
	"testing"
	"time"
)

const interval = int64(250 * time.Millisecond)

// simIdleAfter is the sims' Config.IdleAfter: 20 steps.
const simIdleAfter = 5 * time.Second

// simGoneFor is the sims' Config.GoneFor: longer than the oldest replay
// (keepSent steps, 20 s), as GoneFor must outlast any record in flight.
const simGoneFor = 25 * time.Second

// sim runs n tables in lockstep over a network the test controls: each
// step every table observes its demand, steps, and sends its outbox to
// every peer it is not cut from, which merges it and answers with its own
// records for those keys (one round trip).
type sim struct {
	t    testing.TB
	tabs []*Table
	now  int64
	cut  [][]bool // cut[i][j]: i's requests do not reach j (or j's answers do not reach i)
	// oneWay[i][j]: i's request reaches j but the answer is lost.
	oneWay [][]bool
	// noTake: grants are taken at steps only (no Table.Take as records
	// arrive).
	noTake bool
	// sent keeps the outboxes of the last steps (newest last), for
	// replay: a late delivery of an old exchange.
	sent     [][]map[string][]Record
	answers  [][]answer // the answers of the same steps, for lateAnswer
	replays  int        // late batches delivered to a region without the key
	lateHeld int        // late batches delivered to a region holding the key
	seed     uint64     // the property test's seed, for the failure messages
}

// keepSent is how many steps of outboxes the sim keeps for replay: 80
// steps (20 s), longer than simIdleAfter, so replays reach regions after
// they reset and dropped a key.
const keepSent = 80

// lateHeld is how many steps late the sim delivers a batch to a region
// that holds the key: 4 steps (1 s), an exchange's deadline.
const lateHeld = 4

// replay delivers region i's outbox of back steps ago to region j as a
// request that arrives late: j hears from i, merges it, takes and gives
// (as the agent's Exchange handler), and its answer is lost. Keys j holds
// get it only when it is at most lateHeld steps old (an exchange's
// deadline): their records must not create share in whatever order or
// number they arrive. Keys j does not hold get it up to keepSent steps
// late: a region that dropped a key (after a reset, or never having moved
// its share) must not start an old ledger from it.
func (s *sim) replay(i, j, back int) {
	if i == j || back < 1 || back > len(s.sent) {
		return
	}
	out := s.sent[len(s.sent)-back][i]
	peer := s.tabs[j]
	if back <= lateHeld {
		peer.Heard(i, s.now)
	}
	for key, recs := range out {
		if peer.Has(key) {
			if back > lateHeld {
				continue
			}
			s.lateHeld++
		} else {
			s.replays++
		}
		peer.Merge(i, key, recs)
		if !s.noTake {
			peer.Take(key, s.now)
		}
		peer.Rebalance(key, s.now)
		s.check(key)
	}
}

// answer is the records region from answered region to with for key.
type answer struct {
	from, to int
	key      string
	recs     []Record
}

// lateAnswer delivers to region i the answers region j gave it back
// steps ago (at most lateHeld), as an answer that arrives late, within
// the exchange's deadline: i counts the round trip, merges the records
// and takes the grants they carry (as the agent's absorb).
func (s *sim) lateAnswer(i, j, back int) {
	if i == j || back < 1 || back > lateHeld || back > len(s.answers) {
		return
	}
	tab := s.tabs[i]
	for _, a := range s.answers[len(s.answers)-back] {
		if a.from != j || a.to != i {
			continue
		}
		s.lateHeld++
		tab.RoundTrip(j, s.now)
		tab.Merge(j, a.key, a.recs)
		if !s.noTake {
			tab.Take(a.key, s.now)
		}
		s.check(a.key)
	}
}

// newSim makes a table per region. Five regions are beyond MaxRegions
// (a product limit, for a hole TestTwoLostRegionsTrade shows), but the
// sims study them: the limit is lifted while the tables are made. The
// package's tests do not run in parallel.
func newSim(t testing.TB, names ...string) *sim {
	s := &sim{t: t, now: 1_000_000_000}
	defer func(m int) { MaxRegions = m }(MaxRegions)
	MaxRegions = max(MaxRegions, len(names))
	for _, name := range names {
		cfg := DefaultConfig(name, names)
		cfg.IdleAfter = simIdleAfter // short, so the schedules drop keys too
		cfg.GoneFor = simGoneFor
		tab, err := New(cfg, s.now)
		if err != nil {
			t.Fatal(err)
		}
		s.tabs = append(s.tabs, tab)
	}
	n := len(names)
	s.cut, s.oneWay = make([][]bool, n), make([][]bool, n)
	for i := range s.cut {
		s.cut[i], s.oneWay[i] = make([]bool, n), make([]bool, n)
	}
	return s
}

func (s *sim) cutLink(i, j int, down bool) { s.cut[i][j], s.cut[j][i] = down, down }

func (s *sim) isolate(i int, down bool) {
	for j := range s.tabs {
		if j != i {
			s.cutLink(i, j, down)
		}
	}
}

// step advances one interval; demand[i] tokens are asked in region i for
// key.
func (s *sim) step(key string, demand []int64) {
	s.t.Helper()
	s.stepKeys([]string{key}, demand)
}

// stepKeys advances one interval; demand[i] tokens are asked in region i
// for each of keys.
func (s *sim) stepKeys(keys []string, demand []int64) {
	s.t.Helper()
	for i, tab := range s.tabs {
		if demand[i] > 0 {
			for _, key := range keys {
				tab.Observe(key, demand[i], demand[i])
			}
		}
		tab.Step(s.now)
	}
	for _, key := range keys {
		s.check(key)
	}
	outs := make([]map[string][]Record, len(s.tabs))
	for i, tab := range s.tabs {
		outs[i] = tab.Outbox()
	}
	if s.sent = append(s.sent, outs); len(s.sent) > keepSent {
		s.sent = s.sent[1:]
	}
	var answers []answer
	for i, tab := range s.tabs {
		for j, peer := range s.tabs {
			if i == j || s.cut[i][j] {
				continue
			}
			peer.Heard(tab.Self(), s.now)
			for key, recs := range outs[i] {
				peer.Merge(tab.Self(), key, recs)
			}
			// As the agent's Exchange handler: give, then answer.
			for key := range outs[i] {
				if !s.noTake {
					peer.Take(key, s.now)
				}
				peer.Rebalance(key, s.now)
			}
			if s.oneWay[i][j] {
				continue
			}
			for key := range outs[i] {
				recs := peer.Records(key)
				answers = append(answers, answer{from: j, to: i, key: key, recs: recs})
				tab.Merge(peer.Self(), key, recs)
				if !s.noTake {
					tab.Take(key, s.now)
				}
			}
			tab.RoundTrip(peer.Self(), s.now)
		}
	}
	if s.answers = append(s.answers, answers); len(s.answers) > lateHeld {
		s.answers = s.answers[1:]
	}
	for _, key := range keys {
		s.check(key)
	}
	s.now += interval
}

// check asserts the invariant: the regions' shares add up to at most Whole.
func (s *sim) check(key string) {
	s.t.Helper()
	var sum int64
	for _, tab := range s.tabs {
		sum += tab.Share(key)
		if k := tab.keys[key]; k != nil {
			if h := k.recs[tab.self].Held; h < 0 || h > Whole {
				for j, tb := range s.tabs {
					if kk := tb.keys[key]; kk != nil {
						s.t.Logf("  %d gen %d have %v recs %+v", j, kk.gen, kk.have, kk.recs)
					}
				}
				s.t.Fatalf("seed %d at %v: region %d holds %d of %q", s.seed, time.Duration(s.now), tab.Self(), h, key)
			}
		}
	}
	if sum > Whole {
		for i, tab := range s.tabs {
			k := tab.keys[key]
			if k == nil {
				s.t.Logf("  %d does not hold the key (tombstone %+v)", i, tab.gone[key])
				continue
			}
			me := k.recs[tab.self]
			s.t.Logf("  %d gen %d capped %v have %v", i, k.gen, me.Capped, k.have)
			s.t.Logf("  %d held %d granted %v received %v claimed %v claimseq %v surr %d restored %d restSurr %d restClaimed %v voided %v restVoided %v capSeq %v capGranted %v surrSeq %d surrGranted %v lost %v minority %v",
				i, me.Held, me.Granted, me.Received, me.Claimed, me.ClaimSeq, me.Surrendered, me.Restored, me.RestoreSurrendered, me.RestoreClaimed, me.Voided, me.RestoreVoided, k.capSeq, k.capGranted, me.SurrenderSeq, me.SurrenderGranted, me.Lost, tab.minority)
		}
		s.t.Fatalf("seed %d at %v: shares of %q add up to %d > %d: %v", s.seed, time.Duration(s.now), key, sum, Whole, s.shares(key))
	}
}

func (s *sim) shares(key string) []int64 {
	out := make([]int64, len(s.tabs))
	for i, tab := range s.tabs {
		out[i] = tab.Share(key)
	}
	return out
}

func (s *sim) sum(key string) int64 {
	var sum int64
	for _, v := range s.shares(key) {
		sum += v
	}
	return sum
}

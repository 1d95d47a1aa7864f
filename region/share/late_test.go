package share

import (
	"os"
	"testing"
	"time"
)

// TestLateRequestSplitsTheClaims pins issue 18's late-delivery hole: a
// request that arrives late still counts as contact (the agent calls
// Heard when any request arrives), so one region declares a lost region
// lost later than the others and may claim from it under another
// majority than theirs. Five regions; e holds the key (its home) and is
// cut off from the start. An exchange e sent a step ago reaches c late,
// so a, b and d count e lost 4 s before c does. Their records report e
// lost and c heard from, but c's still report e heard, so nobody
// claims. c is cut off in the step in which it counts e lost: it
// claims its part of e's share from a, b and d's records (every region
// it hears from reports the same lost set) and its record saying so
// never reaches them. c falls into the minority and surrenders, and
// a, b and d count c lost too and claim from e among the three of them.
// When c and e are back, c restores what it surrendered less what was
// claimed from it (nothing: the record they claimed at held the floor),
// its claim included. With each claim a third (a, b, d) or a quarter (c) of
// e's excess, the shares added up to 1,187,498; claims are now a share
// of every other region (a quarter each here), whoever claims, and the
// shares add up to the whole limit again.
func TestLateRequestSplitsTheClaims(t *testing.T) {
	s := newSim(t, "a", "b", "c", "d", "e")
	const c, e = 2, 4
	key := keyHomedAt(e, 5)
	demand := []int64{100, 100, 100, 100, 0}
	claimAfter := int64(s.tabs[c].cfg.ClaimAfter)
	s.isolate(e, true)
	for range 16 {
		s.step(key, demand)
	}
	// e's exchange of a step ago arrives at c now: c hears from e.
	heard := s.now
	s.replay(e, c, 1)
	for s.now-heard <= claimAfter {
		s.step(key, demand)
	}
	if s.tabs[c].keys[key].recs[c].ClaimSeq[e] != 0 {
		t.Fatalf("c claimed from e before it counted e lost")
	}
	s.isolate(c, true)
	s.step(key, demand) // c counts e lost and claims; nobody hears it
	if got := s.tabs[c].keys[key].recs[c].ClaimSeq[e]; got == 0 {
		t.Fatalf("c did not claim from e in the step it counted e lost")
	}
	for range 40 { // c surrenders, the others count c lost and claim
		s.step(key, demand)
	}
	for _, i := range []int{0, 1, 3} {
		if s.tabs[i].keys[key].recs[i].ClaimSeq[c] == 0 {
			t.Fatalf("region %d did not claim from c", i)
		}
	}
	s.isolate(c, false)
	s.isolate(e, false)
	for range 40 { // c and e back: they restore; check() asserts the bound
		s.step(key, demand)
	}
	if r := s.tabs[c].keys[key].recs[c]; r.Restored == 0 {
		t.Fatalf("c restored nothing (surrendered %d)", r.Surrendered)
	}
	if got := s.sum(key); got < Whole-Whole/1000 {
		t.Errorf("at %v the shares add up to %d, want the whole limit %d (±0.1%%): %v", time.Duration(s.now), got, Whole, s.shares(key))
	}
}

// TestTwoLostRegionsTrade is a known defect of the partition rules with
// five regions, found while hunting the one above and not fixed (see
// docs/design.md, "Late batches"): run it with WEIR_KNOWN_DEFECTS=1.
// It is why Config.Validate refuses more than MaxRegions (four) regions. No
// message is late. b holds nearly all of the key; b and d are cut off
// together from a, c and e. Before b falls into the minority (LostAfter)
// it gives its share toward d's demand and d takes it; then both
// surrender. a, c and e count both lost and claim from b's last record
// they hold, from before the cut, which still shows b's share; the share
// b gave d after that record is counted in those claims and in d's
// surrender. Back, d restores its surrender (the others claimed nothing
// from it: their record of d held its floor), and the shares add up to
// well over the whole limit. The regions that count b lost void what it
// granted them after that record; d, which never counted b lost, voids
// nothing.
func TestTwoLostRegionsTrade(t *testing.T) {
	if os.Getenv("WEIR_KNOWN_DEFECTS") == "" {
		t.Skip("known defect, not fixed: WEIR_KNOWN_DEFECTS=1 runs it")
	}
	s := newSim(t, "a", "b", "c", "d", "e")
	const b, d = 1, 3
	key := keyHomedAt(b, 5)
	for range 4 { // every region asks: the key is shared
		s.step(key, []int64{1, 100, 1, 1, 1})
	}
	for range 12 {
		s.step(key, []int64{0, 100, 0, 0, 0})
	}
	for _, i := range []int{b, d} {
		for _, j := range []int{0, 2, 4} {
			s.cutLink(i, j, true)
		}
	}
	for range 40 { // b gives to d, both surrender, a, c and e claim
		s.step(key, []int64{0, 0, 0, 100, 0})
	}
	for i := range s.cut {
		clear(s.cut[i])
	}
	for range 30 { // check() asserts the bound
		s.step(key, []int64{0, 0, 0, 100, 0})
	}
}

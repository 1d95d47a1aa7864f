package region

import (
	"testing"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/region/share"
)

// TestWireGeneration: a record's generation and cap survive the wire, and
// a record from a peer that predates generations (no fields 21, 22) reads
// as generation 0, not capped.
func TestWireGeneration(t *testing.T) {
	n := 3
	vec := func() []int64 { return make([]int64, n) }
	r := share.Record{Origin: 1, Seq: 7, Held: 500, Granted: vec(), Received: vec(), Claimed: vec(), ClaimSeq: vec(),
		Lost: vec(), SurrenderGranted: vec(), Seen: vec(), RestoreClaimed: vec(), Voided: vec(), RestoreVoided: vec(),
		Gen: 4, Capped: true}
	w := recordsToWire([]share.Record{r})
	raw, err := w[0].MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	var back weirv1.RegionRecord
	if err := back.UnmarshalVT(raw); err != nil {
		t.Fatal(err)
	}
	got := fromWire([]*weirv1.RegionRecord{&back})
	if got[0].Gen != 4 || !got[0].Capped {
		t.Fatalf("after the wire: gen %d capped %v, want 4 true", got[0].Gen, got[0].Capped)
	}
	old := w[0]
	old.Gen, old.Capped = 0, false // as an old peer sends it: the fields absent
	raw, err = old.MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	back = weirv1.RegionRecord{}
	if err := back.UnmarshalVT(raw); err != nil {
		t.Fatal(err)
	}
	got = fromWire([]*weirv1.RegionRecord{&back})
	if got[0].Gen != 0 || got[0].Capped || got[0].Held != 500 {
		t.Fatalf("an old peer's record: gen %d capped %v held %d, want 0 false 500", got[0].Gen, got[0].Capped, got[0].Held)
	}
}

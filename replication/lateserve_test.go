package replication

import (
	"context"
	"sync"
	"testing"
)

// slowFirstExport is memCounters whose first Export returns only after
// its context ended: a holder that serves an ask past the asker's
// deadline (a loaded machine).
type slowFirstExport struct {
	*memCounters
	once sync.Once
}

func (c *slowFirstExport) Export(ctx context.Context, parts []uint32) ([]State, error) {
	c.once.Do(func() { <-ctx.Done() })
	return c.memCounters.Export(ctx, parts)
}

// deadlinePeers drops a reply that comes after the ask's deadline, as
// the wire does.
type deadlinePeers struct{ *directPeers }

func (d deadlinePeers) Handoff(ctx context.Context, addr string, req HandoffRequest) (HandoffReply, error) {
	r, err := d.directPeers.Handoff(ctx, addr, req)
	if ctx.Err() != nil {
		return HandoffReply{}, ctx.Err()
	}
	return r, err
}

// A holder that exported the counters after the asker gave up keeps them
// (the reply would have taken them nowhere), and the asker asks it once
// more instead of settling from copies: the spent counters arrive.
// Before, the holder dropped them and the puller started from full
// buckets (TestClusterBackToBackJoinsKeepCounters under load, design.md).
func TestLateServeKeepsCountersAndIsAskedAgain(t *testing.T) {
	ctx := context.Background()
	peers := &directPeers{nodes: map[string]*Handoff{}}
	ca := &slowFirstExport{memCounters: newMemCounters()}
	cb := newMemCounters()
	a := startHandoff(t, "a", 2, ca, deadlinePeers{peers})
	b := startHandoff(t, "b", 2, cb, deadlinePeers{peers})
	peers.nodes["a"], peers.nodes["b"] = a, b
	live := map[string]string{"a": "a", "b": "b"}
	if err := a.ChangeRing(ctx, RingChanged{Place: placeAll(2, "a"), Members: []string{"a"}, Live: map[string]string{"a": "a"}}); err != nil {
		t.Fatal(err)
	}
	for p := range uint32(2) {
		ca.parts[p] = []State{{ID: uint64(10 + p), Partition: p, A: 5, B: 7}}
	}
	both := RingChanged{Place: placeAll(2, "b"), Members: []string{"a", "b"}, Live: live}
	if err := a.ChangeRing(ctx, both); err != nil {
		t.Fatal(err)
	}
	both.Base = placeAll(2, "a")
	if err := b.ChangeRing(ctx, both); err != nil {
		t.Fatal(err)
	}
	for p := range uint32(2) {
		waitState(t, b, p, PartReady)
		if got := cb.get(p); len(got) != 1 || got[0].B != 7 {
			t.Errorf("p%d at the puller: %+v, want the holder's counter (B 7)", p, got)
		}
		if got := ca.get(p); len(got) != 0 {
			t.Errorf("p%d still at the holder: %+v", p, got)
		}
	}
}

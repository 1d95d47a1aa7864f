package replication

import (
	"context"
	"sync"
	"testing"
	"time"
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

// wirePeers is the wire's timing: the holder's deadline is the asker's
// plus the ask's transit (gRPC sends what is left of it), and a reply
// that comes after the asker's deadline is dropped.
type wirePeers struct {
	*directPeers
	transit time.Duration
}

func (w wirePeers) Handoff(ctx context.Context, addr string, req HandoffRequest) (HandoffReply, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		return w.directPeers.Handoff(ctx, addr, req)
	}
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), dl.Add(w.transit))
	defer cancel()
	r, err := w.directPeers.Handoff(sctx, addr, req)
	if ctx.Err() != nil {
		return HandoffReply{}, ctx.Err()
	}
	return r, err
}

// exportPastAsker is memCounters whose first Export returns after the
// asker's deadline but before the holder's own (half the transit before
// it): a holder that answers on a loaded machine, or after waiting out
// its own pull, a moment before its deadline.
type exportPastAsker struct {
	*memCounters
	transit time.Duration
	once    sync.Once
}

func (c *exportPastAsker) Export(ctx context.Context, parts []uint32) ([]State, error) {
	c.once.Do(func() {
		if dl, ok := ctx.Deadline(); ok {
			time.Sleep(time.Until(dl.Add(-c.transit / 2)))
		}
	})
	return c.memCounters.Export(ctx, parts)
}

// A holder whose reply would reach the asker after its deadline hands
// nothing over, though its own deadline (later by the ask's transit) has
// not passed: it keeps the counters for the second ask. Before, it sent
// them in a reply the asker dropped, marked the partitions moved, and the
// asker settled from copies (TestClusterBackToBackJoinsKeepCounters on a
// loaded machine: n4 answered n3's second ask 20 ms late).
func TestReplyPastTheAskersDeadlineKeepsCounters(t *testing.T) {
	ctx := context.Background()
	const transit = 100 * time.Millisecond
	peers := &directPeers{nodes: map[string]*Handoff{}}
	ca := &exportPastAsker{memCounters: newMemCounters(), transit: transit}
	cb := newMemCounters()
	a := startHandoff(t, "a", 2, ca, wirePeers{peers, transit})
	b := startHandoff(t, "b", 2, cb, wirePeers{peers, transit})
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

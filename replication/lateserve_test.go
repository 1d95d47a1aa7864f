package replication

import (
	"context"
	"sync"
	"sync/atomic"
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

// exportUntilAskedAgain is memCounters whose first Export returns after
// its context ended and the asker's second ask was answered (at most
// 300 ms later): a holder still exporting, past the deadline, when the
// asker asks once more.
type exportUntilAskedAgain struct {
	*memCounters
	answered chan struct{}
	once     sync.Once
}

func (c *exportUntilAskedAgain) Export(ctx context.Context, parts []uint32) ([]State, error) {
	c.once.Do(func() {
		<-ctx.Done()
		select {
		case <-c.answered:
		case <-time.After(300 * time.Millisecond):
		}
	})
	return c.memCounters.Export(ctx, parts)
}

// asyncPeers is the wire's timing of a reply: the asker gives up at its
// deadline while the holder's Serve goes on; answered is closed once the
// second ask got its answer.
type asyncPeers struct {
	*directPeers
	calls    *atomic.Int32
	answered chan struct{}
}

func (a asyncPeers) Handoff(ctx context.Context, addr string, req HandoffRequest) (HandoffReply, error) {
	type result struct {
		r   HandoffReply
		err error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := a.directPeers.Handoff(ctx, addr, req)
		ch <- result{r, err}
	}()
	var res result
	select {
	case res = <-ch:
	case <-ctx.Done():
		res.err = ctx.Err()
	}
	if a.calls.Add(1) == 2 {
		close(a.answered)
	}
	return res.r, res.err
}

// The asker's second ask, while the holder still exports for the first
// past its deadline, waits for that Serve to hand the partitions back and
// gets them. Stepped at once, it found them marked moved to the asker
// itself, and the asker settled from copies while the holder kept the
// counters (TestClusterBackToBackJoinsKeepCounters under load: p1338,
// apikey:j6).
func TestSecondAskWaitsForTheFirstServe(t *testing.T) {
	ctx := context.Background()
	peers := &directPeers{nodes: map[string]*Handoff{}}
	answered := make(chan struct{})
	ca := &exportUntilAskedAgain{memCounters: newMemCounters(), answered: answered}
	cb := newMemCounters()
	a := startHandoff(t, "a", 2, ca, peers)
	b := startHandoff(t, "b", 2, cb, asyncPeers{peers, new(atomic.Int32), answered})
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

package events

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBufferKeepsNewestAndStaysBounded(t *testing.T) {
	b := New(8)
	for i := 0; i < 100000; i++ { // a flood of unique keys
		b.Add(Event{Rule: "r", Key: fmt.Sprintf("ip:%d", i), Decision: Denied})
	}
	if b.Len() != 8 {
		t.Fatalf("Len = %d, want 8", b.Len())
	}
	got, next, _ := b.Since(0, Filter{}, 0)
	if len(got) != 8 || got[0].Key != "ip:99992" || got[7].Key != "ip:99999" || next != 100000 {
		t.Fatalf("Since(0) = %d events %v…, next %d", len(got), got[0], next)
	}
	if got[7].Seq != 100000 {
		t.Fatalf("last Seq = %d", got[7].Seq)
	}
}

func TestBufferFilterLimitAndFollow(t *testing.T) {
	b := New(16)
	b.Add(Event{Rule: "a", Key: "k1", Decision: Denied})
	b.Add(Event{Rule: "b", Key: "k1", Decision: Allowed})
	b.Add(Event{Rule: "a", Key: "k2", Decision: Error})
	b.Add(Event{Rule: "a", Key: "k3", Decision: Denied})
	got, next, wake := b.Since(0, Filter{Rule: "a", Decision: Denied}, 0)
	if len(got) != 2 || got[0].Key != "k1" || got[1].Key != "k3" {
		t.Fatalf("filtered = %v", got)
	}
	if got, _, _ := b.Since(0, Filter{Rule: "a"}, 1); len(got) != 1 || got[0].Key != "k3" {
		t.Fatalf("limit 1 = %v, want the newest", got)
	}
	select {
	case <-wake:
		t.Fatal("woken before any new event")
	default:
	}
	go b.Add(Event{Rule: "a", Key: "k4", Decision: Denied})
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("follower not woken by Add")
	}
	got, _, _ = b.Since(next, Filter{}, 0)
	if len(got) != 1 || got[0].Key != "k4" {
		t.Fatalf("after follow = %v", got)
	}
	b.Close()
	_, _, wake = b.Since(next, Filter{}, 0)
	select {
	case <-wake:
	default:
		t.Fatal("Close did not wake followers")
	}
	b.Add(Event{Rule: "a"})
	if b.Len() != 5 {
		t.Fatalf("Add after Close kept an event: Len %d", b.Len())
	}
}

func TestSampledAndRedact(t *testing.T) {
	if Sampled(0, 0) || !Sampled(1, ^uint64(0)) || Sampled(0.5, 1<<63+1) || !Sampled(0.5, 1<<62) {
		t.Fatal("Sampled thresholds wrong")
	}
	if Redact("apikey:a") == Redact("apikey:b") || Redact("apikey:a") != Redact("apikey:a") || Redact("apikey:a")[0] != '~' {
		t.Fatal("Redact is not a stable, distinct hash")
	}
	if !ValidDecision("") || !ValidDecision(Denied) || ValidDecision("nope") {
		t.Fatal("ValidDecision")
	}
}

func TestBufferBoundsKeys(t *testing.T) {
	b := New(4)
	long := strings.Repeat("k", MaxKeyLen+1)
	b.Add(Event{Rule: "r", Key: long, Decision: Denied})
	b.Relay(Event{Seq: 77, Rule: "r", Key: strings.Repeat("k", MaxKeyLen), Decision: Denied})
	got, _, _ := b.Since(0, Filter{}, 0)
	if len(got) != 2 || got[0].Key != Redact(long) || len(got[1].Key) != MaxKeyLen {
		t.Fatalf("held = %v, want the long key as its hash and the other as given", got)
	}
	if got[0].Seq != 1 || got[1].Seq != 77 {
		t.Fatalf("seqs = %d, %d: Add stamps, Relay keeps", got[0].Seq, got[1].Seq)
	}
}

func TestBufferPage(t *testing.T) {
	b := New(8)
	for i := range 12 { // seqs 5..12 held
		b.Add(Event{Rule: "r", Key: fmt.Sprint(i), Decision: Denied})
	}
	var (
		seen  []string
		after uint64
	)
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		evs, next, more := b.Page(after, Filter{}, 3)
		if len(evs) > 3 {
			t.Fatalf("page of %d, want at most 3", len(evs))
		}
		for _, e := range evs {
			seen = append(seen, e.Key)
		}
		after = next
		if !more {
			break
		}
	}
	if strings.Join(seen, ",") != "4,5,6,7,8,9,10,11" || after != 12 {
		t.Fatalf("paged %v to %d, want every held event once, to 12", seen, after)
	}
	if evs, next, more := b.Page(40, Filter{}, 3); len(evs) != 0 || next != 12 || more {
		t.Fatalf("after a restart: %v %d %v, want nothing and 12", evs, next, more)
	}
	if evs, next, _ := b.Page(4, Filter{Key: "9"}, 3); len(evs) != 1 || next != 12 {
		t.Fatalf("filtered page: %v %d", evs, next)
	}
}

// Firsts keeps one denial per rule per interval: the first, per rule, again
// in each new interval, one of many concurrent callers, and nothing for a
// forgotten rule's past.
func TestFirstsOnePerRulePerInterval(t *testing.T) {
	f := NewFirsts(time.Second)
	sec := int64(time.Second)
	steps := []struct {
		rule string
		now  int64
		want bool
	}{
		{"a", 0, true}, // the first ever, at time 0
		{"a", 1, false},
		{"b", 2, true}, // another rule: its own first
		{"a", sec - 1, false},
		{"a", sec, true}, // the next interval
		{"a", sec + 5, false},
		{"a", 3 * sec, true},
		{"a", 2 * sec, false}, // an older interval (a late caller): not kept again
		{"b", 3 * sec, true},
	}
	for i, s := range steps {
		if got := f.First(s.rule, s.now); got != s.want {
			t.Fatalf("step %d: First(%q, %d) = %v, want %v", i, s.rule, s.now, got, s.want)
		}
	}

	var wg sync.WaitGroup
	var kept atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if f.First("c", 10*sec) {
					kept.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if kept.Load() != 1 {
		t.Fatalf("800 concurrent denials in one interval kept %d, want 1", kept.Load())
	}

	f.Forget(func(rule string) bool { return rule == "a" })
	if !f.First("b", 3*sec) || f.First("a", 3*sec) {
		t.Fatal("Forget: a forgotten rule starts over, a live one keeps its interval")
	}
}

// BenchmarkFirstsDenied is what Firsts adds to a denied item on the check
// path: a rule already known, mostly in an interval already kept.
func BenchmarkFirstsDenied(b *testing.B) {
	f := NewFirsts(time.Second)
	var now int64
	for b.Loop() {
		now += 1000 // a denial every µs: one in a million is a first
		f.First("orders.write", now)
	}
}

// Package events holds a node's sampled limit events: a bounded ring
// buffer that keeps the newest Capacity events, whatever the rate or the
// number of distinct keys, and wakes followers when new ones arrive.
//
// Bounds: an event's key is at most MaxKeyLen bytes: a longer one is held
// as its Redact hash, so what a buffer holds is bounded in bytes, not only
// in events, whatever a gateway reports.
//
// Sampling: a node keeps a rule's denials at the rule's sample rate
// (Sampled) and, whatever the rate, the first denial of each rule in each
// interval (Firsts).
//
// Concurrency: a Buffer is safe for concurrent use. One small mutex guards
// the ring; Add copies the event in and never blocks on readers (a
// follower that falls more than Capacity events behind skips what was
// overwritten: its next Since answers from the oldest event still held).
package events

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Decisions as events name them.
const (
	Allowed = "allowed"
	Denied  = "denied"
	Error   = "error" // the owner could not decide; the caller's fail mode applied
)

// Event is one sampled decision.
type Event struct {
	Seq         uint64    `json:"seq"`
	Time        time.Time `json:"time"`
	Rule        string    `json:"rule"`
	RuleVersion uint64    `json:"rule_version"`
	Key         string    `json:"key"`
	Decision    string    `json:"decision"`
	Remaining   int64     `json:"remaining"`
	Node        string    `json:"node"`
	Gateway     string    `json:"gateway,omitempty"`
}

// Filter selects events; empty fields match all.
type Filter struct {
	Rule, Key, Decision string
}

// Match reports whether e passes f.
func (f Filter) Match(e *Event) bool {
	return (f.Rule == "" || f.Rule == e.Rule) && (f.Key == "" || f.Key == e.Key) &&
		(f.Decision == "" || f.Decision == e.Decision)
}

// ValidDecision reports whether d is a decision a filter may name.
func ValidDecision(d string) bool {
	return d == "" || d == Allowed || d == Denied || d == Error
}

// Redact is how a redacted rule's events name a key: "~" and the key's
// xxhash64 in hex, the same for the same key on every node.
func Redact(key string) string {
	return "~" + strconv.FormatUint(xxhash.Sum64String(key), 16)
}

// Sampled reports whether a decision drawn with u (uniform over uint64)
// is kept at rate (0..1).
func Sampled(rate float64, u uint64) bool {
	switch {
	case rate <= 0:
		return false
	case rate >= 1:
		return true
	}
	return float64(u) < rate*(1<<64)
}

// Firsts keeps the first denial of each rule in each interval, whatever
// the rule's sample rate, so events are never empty while a rule denies
// (at 1% a short burst of denials would often leave none). Time is an
// argument (unix nanoseconds). Safe for concurrent use: one atomic per
// rule, no lock on the check path once a rule is known.
type Firsts struct {
	every int64
	last  sync.Map // rule → *atomic.Int64: 1 + the last interval whose first denial was kept
}

// NewFirsts returns a Firsts with intervals of every (at least 1 ns).
func NewFirsts(every time.Duration) *Firsts {
	return &Firsts{every: max(int64(every), 1)}
}

// First reports whether a denial of rule at now is the first of its
// interval (the one to keep); of concurrent callers, one wins.
func (f *Firsts) First(rule string, now int64) bool {
	iv := now/f.every + 1
	p, ok := f.last.Load(rule)
	if !ok {
		p, _ = f.last.LoadOrStore(rule, new(atomic.Int64))
	}
	last := p.(*atomic.Int64)
	old := last.Load()
	return old < iv && last.CompareAndSwap(old, iv)
}

// Forget drops the rules live does not report, so rules deleted from the
// rule set are not held for good.
func (f *Firsts) Forget(live func(rule string) bool) {
	f.last.Range(func(k, _ any) bool {
		if !live(k.(string)) {
			f.last.Delete(k)
		}
		return true
	})
}

// DefaultCapacity is the events a Buffer keeps when New is given 0.
const DefaultCapacity = 4096

// MaxKeyLen is the longest key a Buffer holds as given (limit.MaxKeyLen,
// the longest key a check may name); a longer key is held as its Redact
// hash.
const MaxKeyLen = 256

// boundKey is key, or its hash when it is longer than MaxKeyLen.
func boundKey(key string) string {
	if len(key) > MaxKeyLen {
		return Redact(key)
	}
	return key
}

// Buffer is the ring of the newest events.
type Buffer struct {
	mu     sync.Mutex
	ring   []Event
	next   uint64        // Seq of the next event; events [next-len, next) are held
	wake   chan struct{} // closed and replaced by every Add
	closed bool
}

// New returns a Buffer holding up to capacity events (0: DefaultCapacity).
func New(capacity int) *Buffer {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	return &Buffer{ring: make([]Event, capacity), next: 1, wake: make(chan struct{})}
}

// Capacity is the most events held.
func (b *Buffer) Capacity() int { return len(b.ring) }

// Add appends e, stamping its Seq, and wakes followers.
func (b *Buffer) Add(e Event) { b.add(e, true) }

// Relay appends e keeping the Seq it has (another node's: a buffer that
// mirrors other members' events), and wakes followers. Since's after and
// next still count this buffer's positions.
func (b *Buffer) Relay(e Event) { b.add(e, false) }

func (b *Buffer) add(e Event, stamp bool) {
	e.Key = boundKey(e.Key)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	if stamp {
		e.Seq = b.next
	}
	b.ring[b.next%uint64(len(b.ring))] = e
	b.next++
	w := b.wake
	b.wake = make(chan struct{})
	b.mu.Unlock()
	close(w)
}

// Len is the number of events held.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int(min(b.next-1, uint64(len(b.ring))))
}

// Since returns the held events with Seq > after that match f, oldest
// first, at most limit of them (the newest ones; limit <= 0: all), the
// Seq to pass next time, and a channel closed when a newer event arrives.
func (b *Buffer) Since(after uint64, f Filter, limit int) (out []Event, next uint64, wake <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	oldest := uint64(1)
	if b.next > uint64(len(b.ring)) {
		oldest = b.next - uint64(len(b.ring))
	}
	for s := max(after+1, oldest); s < b.next; s++ {
		e := &b.ring[s%uint64(len(b.ring))]
		if f.Match(e) {
			out = append(out, *e)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, b.next - 1, b.wake
}

// Page returns the held events with Seq > after that match f, oldest
// first, at most n of them (n <= 0: all), the Seq to pass next time (the
// last one looked at), and whether more held events follow it: a reader
// that pages with it sees every event still held, in bounded answers. An
// after beyond the newest Seq (the node restarted) answers nothing and the
// newest Seq, so the reader starts over.
func (b *Buffer) Page(after uint64, f Filter, n int) (out []Event, next uint64, more bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if after >= b.next {
		return nil, b.next - 1, false
	}
	oldest := uint64(1)
	if b.next > uint64(len(b.ring)) {
		oldest = b.next - uint64(len(b.ring))
	}
	s := max(after+1, oldest)
	for ; s < b.next && (n <= 0 || len(out) < n); s++ {
		e := &b.ring[s%uint64(len(b.ring))]
		if f.Match(e) {
			out = append(out, *e)
		}
	}
	return out, s - 1, s < b.next
}

// Close wakes every follower for good; later Adds are dropped.
func (b *Buffer) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.wake)
	}
}

// Closed reports whether Close was called.
func (b *Buffer) Closed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

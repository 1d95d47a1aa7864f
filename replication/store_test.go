package replication

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/weirlimit/weir/internal/testwait"
)

func TestStoreApplyTakePeekDrop(t *testing.T) {
	s := NewStore()
	if s.Len() != 0 || s.Partitions() != 0 {
		t.Fatal("new store not empty")
	}
	log := []int64{5, 6}
	s.Apply("n1", []State{st(1, 20, 1), st(1, 10, 1), st(2, 30, 1), {Partition: 3, ID: 40, Log: log}})
	s.Apply("n1", []State{st(1, 10, 2)}) // newest by arrival wins
	s.Apply("n2", []State{st(2, 31, 1)})
	log[0] = 99 // Apply copied it
	if s.Len() != 5 || s.Partitions() != 3 {
		t.Fatalf("Len %d Partitions %d, want 5 and 3", s.Len(), s.Partitions())
	}
	if from, ok := s.From(2); !ok || from != "n2" {
		t.Errorf("From(2) = %q %v, want n2", from, ok)
	}
	if _, ok := s.From(9); ok {
		t.Error("From of an unknown partition")
	}

	peek := s.Peek([]uint32{3, 1, 1, 9})
	want := []State{{Partition: 3, ID: 40, Log: []int64{5, 6}}, st(1, 10, 2), st(1, 20, 1)}
	if !reflect.DeepEqual(peek, want) {
		t.Fatalf("Peek = %+v\nwant %+v", peek, want)
	}
	peek[0].Log[0] = -1 // Peek returns copies
	if again := s.Peek([]uint32{3}); again[0].Log[0] != 5 {
		t.Errorf("Peek result aliases the store: %v", again[0].Log)
	}
	if s.Len() != 5 {
		t.Errorf("Peek removed states: Len %d", s.Len())
	}

	took := s.Take([]uint32{1})
	if !reflect.DeepEqual(took, []State{st(1, 10, 2), st(1, 20, 1)}) {
		t.Errorf("Take(1) = %+v", took)
	}
	if got := s.Take([]uint32{1}); len(got) != 0 {
		t.Errorf("second Take(1) = %+v, want nothing", got)
	}
	if s.Len() != 3 || s.Partitions() != 2 {
		t.Errorf("after Take: Len %d Partitions %d, want 3 and 2", s.Len(), s.Partitions())
	}

	s.Drop([]uint32{2, 7})
	if s.Len() != 1 || s.Partitions() != 1 {
		t.Errorf("after Drop: Len %d Partitions %d, want 1 and 1", s.Len(), s.Partitions())
	}
	if got := s.Peek([]uint32{2}); len(got) != 0 {
		t.Errorf("dropped partition still has %+v", got)
	}
}

// TestReplicatorToStore runs the real owner and replica sides together over
// an in-process link.
func TestReplicatorToStore(t *testing.T) {
	replica := NewStore()
	p := &places{m: map[uint32][]string{4: {"r"}}}
	r, err := NewReplicator(testConfig(), storeLink{"r": replica}, p.fn)
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	r.Enqueue([]State{st(4, 1, 1), st(4, 2, 1)})
	r.Enqueue([]State{st(4, 1, 2)})
	testwait.Until(t, "replica holds both", func() bool { return replica.Len() == 2 && r.Stats().Pending == 0 })
	got := replica.Take([]uint32{4})
	if !reflect.DeepEqual(got, []State{st(4, 1, 2), st(4, 2, 1)}) {
		t.Errorf("promoted %+v", got)
	}
	if from, _ := replica.From(4); from != "" {
		t.Errorf("From after Take = %q", from)
	}
}

type storeLink map[string]*Store

func (l storeLink) Replicate(_ context.Context, to, from string, states []State) error {
	l[to].Apply(from, states)
	return nil
}

// A fresh state (the owner's counter idled out or refilled) removes the
// copy; fresh states for unknown counters change nothing.
func TestStoreApplyFreshForgets(t *testing.T) {
	s := NewStore()
	s.Apply("n1", []State{st(1, 10, 1), st(1, 11, 1), {Partition: 2, ID: 20, Log: []int64{5}}})
	s.Apply("n1", []State{{Partition: 1, ID: 10}, {Partition: 2, ID: 20, Log: []int64{}}, {Partition: 7, ID: 70}, {Partition: 1, ID: 99}})
	if s.Len() != 1 || s.Partitions() != 1 {
		t.Fatalf("after fresh states: Len %d, Partitions %d; want 1, 1", s.Len(), s.Partitions())
	}
	if got := s.Peek([]uint32{1}); len(got) != 1 || got[0].ID != 11 {
		t.Fatalf("left: %+v, want counter 11", got)
	}
	for _, tc := range []struct {
		s     State
		fresh bool
	}{
		{State{}, true},
		{State{Log: []int64{}}, true},
		{State{A: 1}, false},
		{State{C: -1}, false},
		{State{Log: []int64{0}}, false},
	} {
		if got := tc.s.Fresh(); got != tc.fresh {
			t.Errorf("%+v.Fresh() = %v, want %v", tc.s, got, tc.fresh)
		}
	}
}

// A bounded store refuses a batch naming a partition out of range (whole:
// no ring change would ever drop it) and new counters over its cap, while
// updating counters it holds (probe finding 3: one call stored 1M states
// of made-up partitions, never released).
func TestBoundedStore(t *testing.T) {
	s := NewBoundedStore(StoreLimits{Partitions: 8, MaxStates: 3})
	if err := s.Apply("n1", []State{st(1, 10, 1), st(8, 11, 1)}); !errors.Is(err, ErrRefused) {
		t.Fatalf("partition 8 of 8: err %v, want ErrRefused", err)
	}
	if s.Len() != 0 {
		t.Fatalf("Len %d after a refused batch, want 0", s.Len())
	}
	if err := s.Apply("n1", []State{st(1, 10, 1), st(2, 20, 1), st(7, 70, 1)}); err != nil {
		t.Fatal(err)
	}
	err := s.Apply("n1", []State{st(3, 30, 1), st(1, 10, 2), st(4, 40, 1)})
	if !errors.Is(err, ErrRefused) || s.Len() != 3 || s.Partitions() != 3 {
		t.Fatalf("over the cap: err %v, Len %d, Partitions %d; want ErrRefused, 3, 3", err, s.Len(), s.Partitions())
	}
	if got := s.Peek([]uint32{1}); len(got) != 1 || got[0].A != 2 {
		t.Errorf("held counter not updated over the cap: %+v", got)
	}
	s.Drop([]uint32{7})
	if err := s.Apply("n1", []State{st(3, 30, 1)}); err != nil || s.Len() != 3 {
		t.Errorf("after a drop: err %v, Len %d; want room for one", err, s.Len())
	}
}

// TestStoreSelectLooksAtLongCopiesOnly: with LongFrom, Select sees the
// copies whose idle deadline was long-lived when applied, follows each
// copy's latest state (shortened, idled out, re-applied) and forgets the
// partitions taken or dropped.
func TestStoreSelectLooksAtLongCopiesOnly(t *testing.T) {
	longFrom := int64(1000)
	s := NewBoundedStore(StoreLimits{LongFrom: func() int64 { return longFrom }})
	mk := func(part uint32, id uint64, idle int64) State {
		return State{Partition: part, ID: id, A: 1, Idle: idle}
	}
	all := func(*State) bool { return true }
	ids := func() []uint64 {
		var out []uint64
		for _, st := range s.Select(all) {
			out = append(out, st.ID)
		}
		slices.Sort(out)
		return out
	}
	s.Apply("n1", []State{mk(1, 10, 500), mk(1, 11, 2000), mk(2, 20, 1000), mk(3, 30, 5000)})
	if got, want := ids(), []uint64{11, 20, 30}; !slices.Equal(got, want) {
		t.Fatalf("Select = %v, want the long-lived %v", got, want)
	}
	s.Apply("n1", []State{mk(1, 11, 600), mk(1, 10, 3000)}) // 11 now short, 10 now long
	if got, want := ids(), []uint64{10, 20, 30}; !slices.Equal(got, want) {
		t.Fatalf("after re-applying: Select = %v, want %v", got, want)
	}
	s.Apply("n1", []State{{Partition: 2, ID: 20}}) // idled out
	s.Take([]uint32{3})
	if got, want := ids(), []uint64{10}; !slices.Equal(got, want) {
		t.Fatalf("after a fresh state and a take: Select = %v, want %v", got, want)
	}
	longFrom = 4000 // time moved on: a copy is judged when applied
	s.Apply("n1", []State{mk(4, 40, 3500)})
	if got, want := ids(), []uint64{10}; !slices.Equal(got, want) {
		t.Fatalf("Select = %v, want %v", got, want)
	}
	s.Drop([]uint32{1})
	if got := ids(); len(got) != 0 {
		t.Fatalf("after Drop: Select = %v, want none", got)
	}
	if s.Len() != 1 {
		t.Fatalf("Len %d, want 1 (partition 4's short copy)", s.Len())
	}
}

// BenchmarkStoreSelect: a node's durable-counter write every second looks
// at its replica copies, on a loaded node mostly short-lived (100,000 here)
// beside a few long-lived ones (100): all of them without LongFrom, the
// long ones with it.
func BenchmarkStoreSelect(b *testing.B) {
	for _, indexed := range []bool{false, true} {
		b.Run(map[bool]string{false: "scan", true: "indexed"}[indexed], func(b *testing.B) {
			var lim StoreLimits
			if indexed {
				lim.LongFrom = func() int64 { return 1 << 40 }
			}
			s := NewBoundedStore(lim)
			states := make([]State, 0, 100_100)
			for i := range 100_100 { // i%1001 == 0 for 100 of them
				idle := int64(1 << 30)
				if i%1001 == 0 {
					idle = 1 << 41
				}
				states = append(states, State{Partition: uint32(i % 271), ID: uint64(i), A: 1, Idle: idle})
			}
			s.Apply("n1", states)
			durable := func(st *State) bool { return st.Idle >= 1<<40 }
			b.ResetTimer()
			for b.Loop() {
				if got := len(s.Select(durable)); got != 100 {
					b.Fatalf("%d durable copies, want 100", got)
				}
			}
		})
	}
}

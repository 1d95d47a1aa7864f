package hotkeys

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestSketchExactWhenItFits(t *testing.T) {
	s := New(4)
	for i, k := range []string{"a", "b", "a", "c", "a", "b"} {
		s.Add(k, uint64(i%2+1))
	}
	got := s.Top(10)
	want := []Entry{{"b", 4, 0}, {"a", 3, 0}, {"c", 2, 0}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Top = %v, want %v", got, want)
	}
	if s.Total() != 9 {
		t.Fatalf("Total = %d, want 9", s.Total())
	}
}

// TestSketchBoundsAndHeavyHitters checks the space-saving guarantees
// against exact counts over a skewed stream of many distinct keys.
func TestSketchBoundsAndHeavyHitters(t *testing.T) {
	const capacity = 16
	s := New(capacity)
	exact := map[string]uint64{}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 50000; i++ {
		var k string
		if r.IntN(2) == 0 {
			k = fmt.Sprintf("hot%d", r.IntN(3)) // three heavy keys: ~1/6 each
		} else {
			k = fmt.Sprintf("cold%d", r.IntN(20000))
		}
		s.Add(k, 1)
		exact[k]++
	}
	if s.Len() != capacity {
		t.Fatalf("Len = %d, want %d", s.Len(), capacity)
	}
	top := s.Top(3)
	for i, e := range top {
		if e.Key != fmt.Sprintf("hot%d", 0) && e.Key != "hot1" && e.Key != "hot2" {
			t.Fatalf("Top[%d] = %v, want one of hot0..hot2", i, e)
		}
	}
	for _, e := range s.Top(-1) {
		if e.Count < exact[e.Key] || e.Count-e.Err > exact[e.Key] {
			t.Fatalf("%s: count %d err %d, exact %d: bound broken", e.Key, e.Count, e.Err, exact[e.Key])
		}
	}
	for k, n := range exact {
		if n > s.Total()/capacity {
			if _, ok := s.index[k]; !ok {
				t.Fatalf("%s has %d > total/cap = %d but is not held", k, n, s.Total()/capacity)
			}
		}
	}
	s.Reset()
	if s.Len() != 0 || s.Total() != 0 || len(s.Top(5)) != 0 {
		t.Fatalf("Reset left %d keys, total %d", s.Len(), s.Total())
	}
}

func TestSketchCopiesKeys(t *testing.T) {
	s := New(2)
	b := []byte("apikey:a")
	s.Add(string(b), 1) // string(b) copies anyway; Add clones for callers that alias
	b[7] = 'z'
	if got := s.Top(1)[0].Key; got != "apikey:a" {
		t.Fatalf("key = %q", got)
	}
}

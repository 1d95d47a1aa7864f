package shard

import (
	"math/rand/v2"
	"testing"
)

// dirtySet agrees with a map through adds, growth and many resets,
// including ids that collide in their home slot.
func TestDirtySetMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var d dirtySet
	for round := 0; round < 300; round++ {
		model := map[dirtyKey]bool{}
		n := rng.IntN(500)
		for i := 0; i < n; i++ {
			// Few distinct ids (repeats), and both kinds per id.
			k := dirtyKey{id: uint64(rng.IntN(200)) << 40, log: rng.IntN(2) == 0}
			if got, want := d.add(k), !model[k]; got != want {
				t.Fatalf("round %d: add(%v) = %v, want %v", round, k, got, want)
			}
			model[k] = true
		}
		if d.n != len(model) {
			t.Fatalf("round %d: n = %d, want %d", round, d.n, len(model))
		}
		d.reset()
	}
}

// The generation counter wrapping around does not resurrect old keys.
func TestDirtySetGenerationWrap(t *testing.T) {
	var d dirtySet
	k := dirtyKey{id: 7}
	d.add(k)
	d.gen = ^uint32(0)
	d.add(dirtyKey{id: 9})
	d.reset()
	if !d.add(k) || !d.add(dirtyKey{id: 9}) {
		t.Fatal("a key added before the wrap is still seen after it")
	}
}

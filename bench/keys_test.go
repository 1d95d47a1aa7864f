package bench

import (
	"math"
	"testing"
)

func TestUniformKeys(t *testing.T) {
	const n, draws = 10, 100_000
	g, err := NewKeyGen(n, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, n)
	for i := 0; i < draws; i++ {
		k := g.Next()
		if k < 0 || k >= n {
			t.Fatalf("key %d out of [0, %d)", k, n)
		}
		counts[k]++
	}
	for k, c := range counts {
		if math.Abs(float64(c)-draws/n) > 0.05*draws/n {
			t.Fatalf("key %d drawn %d times, want about %d: %v", k, c, draws/n, counts)
		}
	}
}

func TestZipfKeys(t *testing.T) {
	const n, draws = 100_000, 200_000
	g, err := NewKeyGen(n, true, 7)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[int]int{}
	for i := 0; i < draws; i++ {
		k := g.Next()
		if k < 0 || k >= n {
			t.Fatalf("key %d out of [0, %d)", k, n)
		}
		counts[k]++
	}
	// P(k) ∝ (1+k)^-s: key 0 is hottest, and the 0:1 ratio is 2^s ≈ 2.14.
	for k := 1; k < 10; k++ {
		if counts[k] >= counts[0] {
			t.Fatalf("key %d (%d) as hot as key 0 (%d)", k, counts[k], counts[0])
		}
	}
	if r := float64(counts[0]) / float64(counts[1]); math.Abs(r-math.Pow(2, ZipfS)) > 0.15 {
		t.Fatalf("count(0)/count(1) = %.3f, want about %.3f", r, math.Pow(2, ZipfS))
	}
	// Hot keys dominate: the top 10 keys take far more than 10/n of draws,
	// yet the tail is reached.
	top := 0
	for k := 0; k < 10; k++ {
		top += counts[k]
	}
	if top < draws/4 || len(counts) < 1000 {
		t.Fatalf("top-10 share %d of %d, distinct keys %d", top, draws, len(counts))
	}
	// Same seed, same sequence.
	a, _ := NewKeyGen(n, true, 3)
	b, _ := NewKeyGen(n, true, 3)
	for i := 0; i < 100; i++ {
		if a.Next() != b.Next() {
			t.Fatal("same seed gave different keys")
		}
	}
	if _, err := NewKeyGen(0, true, 1); err == nil {
		t.Fatal("0 keys accepted")
	}
}

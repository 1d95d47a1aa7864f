package bench

import (
	"fmt"
	"math/rand/v2"
)

// ZipfS is the Zipf exponent of the hot-key distribution.
const ZipfS = 1.1

// KeyGen draws key indexes in [0, n). It is not safe for concurrent use:
// each caller owns one.
type KeyGen interface {
	Next() int
}

// NewKeyGen returns a generator of indexes in [0, n), uniform or (zipf)
// Zipf-distributed with s = ZipfS so that index 0 is the hottest, seeded
// deterministically by seed.
func NewKeyGen(n int, zipf bool, seed uint64) (KeyGen, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: %d keys", ErrInput, n)
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	if !zipf || n == 1 {
		return uniform{r: r, n: n}, nil
	}
	return zipfGen{z: rand.NewZipf(r, ZipfS, 1, uint64(n-1))}, nil
}

type uniform struct {
	r *rand.Rand
	n int
}

func (u uniform) Next() int { return u.r.IntN(u.n) }

type zipfGen struct{ z *rand.Zipf }

func (g zipfGen) Next() int { return int(g.z.Uint64()) }

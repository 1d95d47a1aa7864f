package bucket

import (
	"math"
	"math/bits"
)

// u128 is an unsigned 128-bit integer. The algorithms keep token amounts
// scaled by the period (or, equivalently, time scaled by the rate) so that
// every quantity is an exact integer; products such as burst×period need
// more than 64 bits (1e9 tokens × 365 days ≈ 3.2e25).
type u128 struct{ hi, lo uint64 }

func mul(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, c)
	return u128{hi, lo}
}

func (x u128) add64(y uint64) u128 { return x.add(u128{0, y}) }

// sub returns x-y, or 0 when y > x.
func (x u128) sub(y u128) u128 {
	if x.less(y) {
		return u128{}
	}
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, b)
	return u128{hi, lo}
}

func (x u128) less(y u128) bool {
	return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo)
}

func (x u128) zero() bool { return x.hi == 0 && x.lo == 0 }

func min128(x, y u128) u128 {
	if y.less(x) {
		return y
	}
	return x
}

// divmod returns x/d and x%d for d > 0. A quotient that does not fit in 64
// bits saturates to MaxUint64 (remainder 0); validated limits never get there.
func (x u128) divmod(d uint64) (q, r uint64) {
	if x.hi >= d {
		return math.MaxUint64, 0
	}
	return bits.Div64(x.hi, x.lo, d)
}

// divCeil returns ⌈x/d⌉ for d > 0, saturating like divmod.
func (x u128) divCeil(d uint64) uint64 {
	q, r := x.divmod(d)
	if r != 0 && q != math.MaxUint64 {
		q++
	}
	return q
}

// sat converts a non-negative quantity to int64, saturating at MaxInt64.
func sat(u uint64) int64 {
	if u > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(u)
}

// windowStart returns the start of the period-aligned window holding t
// (t - t mod p, with the modulus taken towards negative infinity).
func windowStart(t, p int64) int64 {
	m := t % p
	if m < 0 {
		m += p
	}
	return t - m
}

package rulesraft

// pieces is a sorted list of pointers stored in pieces, so that the
// versions of the history share every piece they have in common: a kept
// version costs memory in proportion to what it changed (plus one pointer
// per piece), not to the size of the set.
//
// A piece ends after an element whose key hashes to 0 modulo pieceSpread,
// or at pieceMax elements. Boundaries depend on the elements themselves,
// not on their positions, so inserting or deleting one element changes the
// piece it falls in and leaves the others as they were.
type pieces[T any] []*piece[T]

type piece[T any] struct{ items []*T }

const (
	pieceSpread = 32
	pieceMax    = 256
)

// boundary reports whether a piece ends after an element with key k
// (FNV-1a: stable, cheap, and spread enough for ids).
func boundary(k string) bool {
	h := uint32(2166136261)
	for i := 0; i < len(k); i++ {
		h ^= uint32(k[i])
		h *= 16777619
	}
	return h%pieceSpread == 0
}

// toPieces splits flat into pieces, reusing every piece of like that holds
// exactly the same pointers.
func toPieces[T any](flat []*T, key func(*T) string, like pieces[T]) pieces[T] {
	if len(flat) == 0 {
		return nil
	}
	reuse := make(map[*T]*piece[T], len(like))
	for _, p := range like {
		reuse[p.items[0]] = p
	}
	var out pieces[T]
	start := 0
	for i, e := range flat {
		if i+1 < len(flat) && i+1-start < pieceMax && !boundary(key(e)) {
			continue
		}
		items := flat[start : i+1]
		p := reuse[items[0]]
		if p == nil || !samePointers(p.items, items) {
			p = &piece[T]{items: append([]*T(nil), items...)}
		}
		out = append(out, p)
		start = i + 1
	}
	return out
}

func samePointers[T any](a, b []*T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// flat returns the elements in order, in a new slice.
func (ps pieces[T]) flat() []*T {
	n := 0
	for _, p := range ps {
		n += len(p.items)
	}
	if n == 0 {
		return nil
	}
	out := make([]*T, 0, n)
	for _, p := range ps {
		out = append(out, p.items...)
	}
	return out
}

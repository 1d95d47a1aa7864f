package ring

import "slices"

// Move describes one partition whose owner or replica list differs between
// two rings. OldReplicas and NewReplicas start with the owner, as
// PartitionReplicas does; a side with no members has owner "" and nil
// replicas.
type Move struct {
	Partition   uint32
	OldOwner    string
	NewOwner    string
	OldReplicas []string
	NewReplicas []string
}

// OwnerChanged reports whether the partition changes owner.
func (m Move) OwnerChanged() bool { return m.OldOwner != m.NewOwner }

// Gained returns the members that hold the partition after the change but
// not before: the ones that must receive its state.
func (m Move) Gained() []string { return missing(m.NewReplicas, m.OldReplicas) }

// Lost returns the members that held the partition before the change but no
// longer do: the ones that may drop its state.
func (m Move) Lost() []string { return missing(m.OldReplicas, m.NewReplicas) }

func missing(from, in []string) []string {
	var out []string
	for _, id := range from {
		if !slices.Contains(in, id) {
			out = append(out, id)
		}
	}
	return out
}

// Diff lists, by ascending partition, every partition whose owner or
// ordered replica list differs from old to new. A nil ring is a ring with
// no members: Diff(nil, r) lists every partition r assigns. Both rings must
// have the same partition count (it is fixed for a cluster); Diff panics
// otherwise.
func Diff(old, new *Ring) []Move {
	switch {
	case old == nil && new == nil:
		return nil
	case old == nil:
		old = &Ring{nparts: new.nparts}
	case new == nil:
		new = &Ring{nparts: old.nparts}
	}
	if old.nparts != new.nparts {
		panic("ring: Diff of rings with different partition counts")
	}
	var moves []Move
	for p := range uint32(old.nparts) {
		or, nr := old.row(p), new.row(p)
		if slices.Equal(or, nr) {
			continue
		}
		m := Move{Partition: p, OldReplicas: slices.Clone(or), NewReplicas: slices.Clone(nr)}
		if len(or) > 0 {
			m.OldOwner = or[0]
		}
		if len(nr) > 0 {
			m.NewOwner = nr[0]
		}
		moves = append(moves, m)
	}
	return moves
}

// row is p's replica list, nil for a ring without members.
func (r *Ring) row(p uint32) []string {
	if len(r.replicas) == 0 {
		return nil
	}
	return r.replicas[p]
}

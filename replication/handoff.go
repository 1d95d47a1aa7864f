package replication

import "slices"

// Move is one partition whose owner or replicas change between two rings
// (Diff computes them from two placements: Partitions from the
// Assignments it is given, clusterview.Diff from two rings). OldReplicas
// and NewReplicas list the owner first; an empty side has owner "" and
// nil replicas.
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

// Source says whom to ask for a partition's counters, best first: the
// previous owner if alive (it has every change), then the previous replicas
// that are alive. Self comes right after the previous owner when this node
// held a replica copy (it is as fresh as any other replica's and costs no
// RPC): the node then takes it from its own Store. Other replicas follow
// in ring order. An empty From means no copy survives and the partition
// starts with fresh counters.
type Source struct {
	Partition uint32
	From      []string
	// Gone, for a take-back, is the puller the partition was handed to,
	// gone since with its counters: copies it sent this node are the
	// freshest there are, so they are promoted rather than From asked.
	Gone string
}

// PlanHandoff decides, for the node self, what a ring change means. It is
// pure: alive reports current membership and is the only input besides the
// moves. Results keep the order of moves.
//
//   - gain: partitions self owns now and did not own before, with sources.
//   - lose: partitions self owned and no longer owns: hand them off to the
//     new owner, then drop them from the engine.
//   - dropReplica: partitions self held as a replica (not owner) and holds in
//     no role now: drop them from the Store. A replica promoted to owner is
//     in gain instead (its copy is consumed by Take).
func PlanHandoff(self string, moves []Move, alive func(id string) bool) (gain []Source, lose []uint32, dropReplica []uint32) {
	for _, m := range moves {
		wasOwner, isOwner := m.OldOwner == self, m.NewOwner == self
		wasReplica := !wasOwner && slices.Contains(m.OldReplicas, self)
		isReplica := !isOwner && slices.Contains(m.NewReplicas, self)
		switch {
		case isOwner && !wasOwner:
			gain = append(gain, Source{Partition: m.Partition, From: sources(self, m, alive)})
		case wasOwner && !isOwner:
			lose = append(lose, m.Partition)
		case wasReplica && !isReplica && !isOwner:
			dropReplica = append(dropReplica, m.Partition)
		}
	}
	return gain, lose, dropReplica
}

func sources(self string, m Move, alive func(string) bool) []string {
	var from []string
	if m.OldOwner != "" && alive(m.OldOwner) {
		from = append(from, m.OldOwner)
	}
	if m.OldOwner != self && slices.Contains(m.OldReplicas, self) {
		from = append(from, self) // a local copy, as fresh as any other replica's
	}
	for _, id := range m.OldReplicas {
		if id == "" || id == m.OldOwner || slices.Contains(from, id) {
			continue
		}
		if alive(id) {
			from = append(from, id)
		}
	}
	return from
}

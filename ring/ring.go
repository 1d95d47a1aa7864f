package ring

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// Ring maps keys to partitions and partitions to an owner and replicas for
// one member set. It is immutable after New and safe for concurrent use
// without locks; on a membership change build a new Ring and swap the
// pointer (e.g. atomic.Pointer[Ring]). Methods must not be called on a nil
// *Ring: start from New(nil, cfg), which owns nothing.
type Ring struct {
	cfg     Config
	nparts  uint64
	members []string // sorted, distinct, non-empty

	// owners[p] is the owner of partition p ("" when there are no members).
	owners []string
	// replicas[p] is owners[p] followed by min(Replicas, members)-1 other
	// members; every row is a capped sub-slice of one backing array.
	replicas [][]string

	// circle is consistent's hash circle rebuilt here (see vnodeKey), used
	// to choose replicas and to answer Replicas for n > cfg.Replicas.
	circle []vnode
}

// vnode is one point of the hash circle.
type vnode struct {
	hash   uint64
	member int32 // index into Ring.members
}

// member adapts a node ID to consistent.Member.
type member string

func (m member) String() string { return string(m) }

// hasher is xxhash64, as consistent.Hasher.
type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// New builds the ring for members (node IDs, in any order) under cfg. IDs
// must be non-empty and distinct (ErrInvalidMember). Zero members is
// allowed: such a ring owns nothing and Owner returns "". New fails with
// ErrCapacity when the members cannot hold every partition within the load
// bound, e.g. more members than partitions.
func New(members []string, cfg Config) (*Ring, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()

	sorted := slices.Clone(members)
	slices.Sort(sorted)
	for i, id := range sorted {
		if id == "" {
			return nil, fmt.Errorf("%w: empty ID", ErrInvalidMember)
		}
		if i > 0 && sorted[i-1] == id {
			return nil, fmt.Errorf("%w: duplicate ID %q", ErrInvalidMember, id)
		}
	}
	n := len(sorted)
	if n > 0 && n*cfg.MaxLoad(n) < cfg.PartitionCount {
		return nil, fmt.Errorf("%w: %d members, %d partitions, load %v", ErrCapacity, n, cfg.PartitionCount, cfg.Load)
	}

	r := &Ring{
		cfg:     cfg,
		nparts:  uint64(cfg.PartitionCount),
		members: sorted,
		owners:  make([]string, cfg.PartitionCount),
	}
	r.replicas = make([][]string, cfg.PartitionCount)
	if n == 0 {
		return r, nil
	}

	if err := r.assignOwners(); err != nil {
		return nil, err
	}
	r.buildCircle()
	if cfg.Layout == LayoutBalanced {
		r.lift()
	}

	k := min(cfg.Replicas, n)
	backing := make([]string, 0, k*cfg.PartitionCount)
	held := make([]int, n)
	limit := int(math.Ceil(float64(cfg.PartitionCount*(k-1)) / float64(n) * cfg.Load))
	for p := range r.owners {
		start := len(backing)
		backing = append(backing, r.owners[p])
		backing = r.appendSuccessors(backing, start, uint32(p), k, held, limit)
		r.replicas[p] = backing[start:len(backing):len(backing)]
	}
	return r, nil
}

// assignOwners lets consistent distribute the partitions. Members are added
// in sorted order, so the result depends only on the member set.
func (r *Ring) assignOwners() (err error) {
	ms := make([]consistent.Member, len(r.members))
	for i, id := range r.members {
		ms[i] = member(r.vnodeBase(id))
	}
	// consistent panics when it finds no member with room for a partition.
	// New checks capacity first; this only guards what that check misses.
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: consistent: %v", ErrCapacity, v)
		}
	}()
	c := consistent.New(ms, consistent.Config{
		Hasher:            hasher{},
		PartitionCount:    r.cfg.PartitionCount,
		ReplicationFactor: r.cfg.ReplicationFactor,
		Load:              r.cfg.Load,
	})
	for p := range r.owners {
		o := c.GetPartitionOwner(p)
		if o == nil {
			return fmt.Errorf("%w: partition %d has no owner", ErrCapacity, p)
		}
		r.owners[p] = r.members[r.memberIndex(o.String())]
	}
	return nil
}

// lift gives every member at least ceil(PartitionCount/members * (2-Load))
// partitions (LayoutBalanced): while one has fewer, the most-loaded member
// (the first by ID on a tie) gives it the partition whose hash with the
// receiver's ID is lowest (rendezvous hashing, so the same partitions tend
// to move whatever the rest of the member set). It never raises the most
// loaded, so Load's cap still holds.
func (r *Ring) lift() {
	n := len(r.members)
	lo := int(math.Ceil(float64(r.cfg.PartitionCount) / float64(n) * (2 - r.cfg.Load)))
	owned := make([][]uint32, n)
	for p, o := range r.owners {
		i, _ := slices.BinarySearch(r.members, o)
		owned[i] = append(owned[i], uint32(p))
	}
	var buf []byte
	for {
		u, m := 0, 0
		for i := range owned {
			if len(owned[i]) < len(owned[u]) {
				u = i
			}
			if len(owned[i]) > len(owned[m]) {
				m = i
			}
		}
		if len(owned[u]) >= lo || len(owned[m])-1 <= len(owned[u]) {
			return
		}
		best, bestScore := 0, uint64(math.MaxUint64)
		for j, p := range owned[m] {
			buf = binary.LittleEndian.AppendUint32(append(buf[:0], r.members[u]...), p)
			if s := xxhash.Sum64(buf); s < bestScore {
				best, bestScore = j, s
			}
		}
		p := owned[m][best]
		owned[m] = slices.Delete(owned[m], best, best+1)
		owned[u] = append(owned[u], p)
		r.owners[p] = r.members[u]
	}
}

// vnodeBase is the name consistent is given for member id: the ID, and
// with LayoutBalanced a "#" after it.
func (r *Ring) vnodeBase(id string) string {
	if r.cfg.Layout == LayoutConsistent {
		return id
	}
	return id + "#"
}

// memberIndex is the index in members of the member consistent knows as
// base (a vnodeBase).
func (r *Ring) memberIndex(base string) int {
	if r.cfg.Layout != LayoutConsistent {
		base = base[:len(base)-1]
	}
	i, _ := slices.BinarySearch(r.members, base)
	return i
}

// vnodeKey is the name consistent v0.10.0 hashes for virtual node i of a
// member whose vnodeBase is base: fmt.Sprintf("%s%d", base, i).
func vnodeKey(buf []byte, base string, i int) []byte {
	return strconv.AppendInt(append(buf[:0], base...), int64(i), 10)
}

// buildCircle rebuilds consistent's hash circle: ReplicationFactor points per
// member. Where two points collide, consistent keeps the member added last
// (members are added in sorted order), and so does this.
func (r *Ring) buildCircle() {
	rf := r.cfg.ReplicationFactor
	r.circle = make([]vnode, 0, len(r.members)*rf)
	var buf []byte
	for mi, id := range r.members {
		base := r.vnodeBase(id)
		for i := range rf {
			buf = vnodeKey(buf, base, i)
			r.circle = append(r.circle, vnode{hash: xxhash.Sum64(buf), member: int32(mi)})
		}
	}
	// Stable by hash, then the later member wins every colliding point.
	slices.SortStableFunc(r.circle, func(a, b vnode) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		}
		return 0
	})
	for i := len(r.circle) - 2; i >= 0; i-- {
		if r.circle[i].hash == r.circle[i+1].hash {
			r.circle[i].member = r.circle[i+1].member
		}
	}
}

// partitionPoint is where consistent places partition p on the circle: the
// first point at or after xxhash(p as 8 little-endian bytes), wrapping.
func (r *Ring) partitionPoint(p uint32) int {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(p))
	h := xxhash.Sum64(b[:])
	i := sort.Search(len(r.circle), func(i int) bool { return r.circle[i].hash >= h })
	if i == len(r.circle) {
		i = 0
	}
	return i
}

// appendSuccessors extends the replica list dst[start:] (the owner first)
// to k members with the members whose points follow p's point on the
// circle, skipping members already listed: the members that would take p
// if the ones before them left. With held non-nil it also skips members
// already holding limit non-owner replicas (counted in held), unless no
// other member is left, which bounds replica load as Load bounds ownership.
func (r *Ring) appendSuccessors(dst []string, start int, p uint32, k int, held []int, limit int) []string {
	if len(dst)-start >= k {
		return dst
	}
	at := r.partitionPoint(p)
	for pass := 0; pass < 2 && len(dst)-start < k; pass++ {
		bounded := held != nil && pass == 0
		for step := 0; step < len(r.circle) && len(dst)-start < k; step++ {
			mi := r.circle[(at+step)%len(r.circle)].member
			id := r.members[mi]
			if slices.Contains(dst[start:], id) || (bounded && held[mi] >= limit) {
				continue
			}
			dst = append(dst, id)
			if held != nil {
				held[mi]++
			}
		}
	}
	return dst
}

// Members returns the member IDs, sorted.
func (r *Ring) Members() []string { return slices.Clone(r.members) }

// Len returns the number of members.
func (r *Ring) Len() int { return len(r.members) }

// Contains reports whether id is a member.
func (r *Ring) Contains(id string) bool {
	_, ok := slices.BinarySearch(r.members, id)
	return ok
}

// Config returns the configuration in effect (defaults filled in).
func (r *Ring) Config() Config { return r.cfg }

// PartitionCount returns the number of partitions.
func (r *Ring) PartitionCount() int { return int(r.nparts) }

// Partition returns key's partition: xxhash64(key) mod PartitionCount, as
// consistent's FindPartitionID computes it.
func (r *Ring) Partition(key string) uint32 {
	return uint32(xxhash.Sum64String(key) % r.nparts)
}

// Owner returns the member that decides for key, or "" if there are no
// members. It is a hash and a table lookup; it does not allocate.
func (r *Ring) Owner(key string) string {
	return r.owners[xxhash.Sum64String(key)%r.nparts]
}

// Replicas returns the owner of key followed by the next distinct members in
// replica order; its length is min(n, members). The first min(n, Replicas)
// entries equal PartitionReplicas(Partition(key)).
func (r *Ring) Replicas(key string, n int) []string {
	if n <= 0 || len(r.members) == 0 {
		return nil
	}
	p := r.Partition(key)
	if n <= len(r.replicas[p]) {
		return slices.Clone(r.replicas[p][:n])
	}
	dst := append(make([]string, 0, min(n, len(r.members))), r.replicas[p]...)
	return r.appendSuccessors(dst, 0, p, n, nil, 0)
}

// PartitionOwner returns the owner of partition p, or "" if p is out of
// range or there are no members.
func (r *Ring) PartitionOwner(p uint32) string {
	if uint64(p) >= r.nparts {
		return ""
	}
	return r.owners[p]
}

// PartitionReplicas returns a copy of p's owner followed by its
// min(Replicas, members)-1 replicas; nil if p is out of range or there are
// no members.
func (r *Ring) PartitionReplicas(p uint32) []string {
	if uint64(p) >= r.nparts {
		return nil
	}
	return slices.Clone(r.replicas[p])
}

// AppendPartitionReplicas is PartitionReplicas appending to dst, for
// callers that reuse a buffer.
func (r *Ring) AppendPartitionReplicas(dst []string, p uint32) []string {
	if uint64(p) >= r.nparts {
		return dst
	}
	return append(dst, r.replicas[p]...)
}

// OwnedBy returns the partitions id owns, ascending.
func (r *Ring) OwnedBy(id string) []uint32 {
	var ps []uint32
	for p, o := range r.owners {
		if o == id && id != "" {
			ps = append(ps, uint32(p))
		}
	}
	return ps
}

// HeldBy returns the partitions for which id is a replica but not the
// owner, ascending.
func (r *Ring) HeldBy(id string) []uint32 {
	var ps []uint32
	for p, rs := range r.replicas {
		if len(rs) > 1 && id != "" && slices.Contains(rs[1:], id) {
			ps = append(ps, uint32(p))
		}
	}
	return ps
}

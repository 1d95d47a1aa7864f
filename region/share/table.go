package share

import (
	"slices"

	"github.com/cespare/xxhash/v2"
)

type tombstone struct{ gen, at int64 }

type keyState struct {
	recs   []Record // latest record per origin; recs[i].Seq == 0 && !have[i]: none
	have   []bool
	asked  int64 // since the last step
	spent  int64
	shared bool // exchanged with the other regions
	fresh  bool // no peer batch merged yet: a relayed record of this region is adopted
	// Per region j this region declared lost at j's record capSeq[j]-1:
	// it takes no more of j's grants than capGranted[j] (what that record
	// granted it) until j's record shows a surrender after it; voided[j]
	// is the share j granted in between, never taken (the majority's
	// claims counted it as j's).
	capSeq     []int64
	capGranted []int64
	direct     []int64 // per region: Seq of its last record received from itself
	lastAsk    int64   // the step at which this region last asked for the key (0: none yet)
	gen        int64   // the ledger generation; every record in recs is of it
}

// Table holds this region's view of every shared key. It is not safe for
// concurrent use: one goroutine (the region loop) owns it.
type Table struct {
	cfg     Config
	regions []string
	self    int
	keys    map[string]*keyState
	// gone: keys dropped at a generation above 0, for GoneFor after the
	// drop: the generation, so records of an older one still in
	// flight are ignored rather than start the old ledger again.
	gone     map[string]tombstone
	resets   int64   // keys moved to a new generation (Resets)
	heard    []int64 // per region: last contact of any kind (unix ns)
	ok       []int64 // per region: last round trip this region made (unix ns)
	minority bool
	fell     bool // in the minority at the last step: new keys start at the floor
}

// New returns a table whose regions all count as reached at now.
func New(cfg Config, now int64) (*Table, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	regions := slices.Clone(cfg.Regions)
	slices.Sort(regions)
	t := &Table{cfg: cfg, regions: regions, self: slices.Index(regions, cfg.Self), keys: map[string]*keyState{}, gone: map[string]tombstone{},
		heard: make([]int64, len(regions)), ok: make([]int64, len(regions))}
	for i := range regions {
		t.heard[i], t.ok[i] = now, now
	}
	return t, nil
}

// Regions returns the sorted region names records are indexed by.
func (t *Table) Regions() []string { return slices.Clone(t.regions) }

// Self is this region's index.
func (t *Table) Self() int { return t.self }

// Minority reports whether this region is cut off from a majority.
func (t *Table) Minority() bool { return t.minority }

// Home is the region that holds a key's share above the floors until
// another region asks for it: keys used in one region only cost no
// exchange when that region is their home.
func Home(key string, n int) int { return int(xxhash.Sum64String(key) % uint64(n)) }

func (t *Table) initial(key string, i int) int64 {
	n := int64(len(t.regions))
	if Home(key, len(t.regions)) == i {
		return Whole - (n-1)*t.cfg.Floor
	}
	return t.cfg.Floor
}

func (t *Table) key(key string) *keyState {
	if k := t.keys[key]; k != nil {
		return k
	}
	k := t.newState(key, t.gone[key].gen)
	delete(t.gone, key)
	t.keys[key] = k
	return k
}

// newState is a fresh ledger of key at generation gen: every region at
// its initial share.
func (t *Table) newState(key string, gen int64) *keyState {
	n := len(t.regions)
	k := &keyState{recs: make([]Record, n), have: make([]bool, n),
		capSeq: make([]int64, n), capGranted: make([]int64, n), direct: make([]int64, n), gen: gen}
	for i := range k.recs {
		k.recs[i] = Record{Origin: i, Granted: make([]int64, n), Received: make([]int64, n), Claimed: make([]int64, n),
			ClaimSeq: make([]int64, n), Lost: make([]int64, n), SurrenderGranted: make([]int64, n),
			Seen: make([]int64, n), RestoreClaimed: make([]int64, n), Voided: make([]int64, n), RestoreVoided: make([]int64, n),
			Gen: gen}
		k.recs[i].Held = t.initial(key, i)
	}
	k.have[t.self] = true
	k.fresh = true
	if t.minority && t.initial(key, t.self) > t.cfg.Floor {
		// Cut off from the majority, which may have claimed this region's
		// home share of keys it had not seen yet.
		k.recs[t.self].Surrendered = t.initial(key, t.self) - t.cfg.Floor
		k.recs[t.self].Held = t.cfg.Floor
		// After any record the others may have claimed at (none yet:
		// Seq 0), so the restore waits until they have seen one.
		k.recs[t.self].SurrenderSeq = 1
	}
	return k
}

// renew replaces key's ledger by a fresh one of generation gen (a reset):
// this region's traffic, its Seq and whether the key is shared carry over.
func (t *Table) renew(key string, k *keyState, gen int64) *keyState {
	nk := t.newState(key, gen)
	nk.asked, nk.spent, nk.lastAsk, nk.shared = k.asked, k.spent, k.lastAsk, k.shared
	if me := &nk.recs[t.self]; me.Surrendered > 0 {
		me.SurrenderSeq = k.recs[t.self].Seq + 1
	}
	nk.recs[t.self].Seq = k.recs[t.self].Seq
	t.keys[key] = nk
	t.resets++
	return nk
}

// Resets reports how many times a key of this table moved to a new
// generation.
func (t *Table) Resets() int64 { return t.resets }

// topGen is the newest generation among the valid records of recs, at
// least gen.
func (t *Table) topGen(gen int64, recs []Record) int64 {
	for i := range recs {
		if recs[i].valid(len(t.regions)) {
			gen = max(gen, recs[i].Gen)
		}
	}
	return gen
}

// Share is this region's share of key, in shares of Whole.
func (t *Table) Share(key string) int64 {
	if k := t.keys[key]; k != nil {
		h := k.recs[t.self].Held
		if k.recs[t.self].Capped {
			h = min(h, t.initial(key, t.self))
		}
		return max(0, min(Whole, h))
	}
	if t.fell {
		return t.cfg.Floor
	}
	return t.initial(key, t.self)
}

// Has reports whether the table holds key.
func (t *Table) Has(key string) bool { return t.keys[key] != nil }

// Keys returns the keys the table holds.
func (t *Table) Keys() []string {
	out := make([]string, 0, len(t.keys))
	for k := range t.keys {
		out = append(out, k)
	}
	return out
}

// Forget drops a key (this node no longer owns it in its region; the new
// owner recovers the region's record from the peers' relays).
func (t *Table) Forget(key string) { delete(t.keys, key) }

// Snapshot is an immutable copy of this region's shares, for readers on
// other goroutines.
type Snapshot struct {
	shares map[string]int64
	n      int
	self   int
	floor  int64
	fell   bool
}

// Snapshot copies the current shares.
func (t *Table) Snapshot() *Snapshot {
	m := make(map[string]int64, len(t.keys))
	for key := range t.keys {
		m[key] = t.Share(key)
	}
	return &Snapshot{shares: m, n: len(t.regions), self: t.self, floor: t.cfg.Floor, fell: t.fell}
}

// Keys returns the keys the snapshot holds.
func (s *Snapshot) Keys() []string {
	out := make([]string, 0, len(s.shares))
	for k := range s.shares {
		out = append(out, k)
	}
	return out
}

// Has reports whether the table held key at the snapshot.
func (s *Snapshot) Has(key string) bool { _, ok := s.shares[key]; return ok }

// Share is the share of key as of the snapshot (a key the table did not
// hold has its initial share).
func (s *Snapshot) Share(key string) int64 {
	if v, ok := s.shares[key]; ok {
		return v
	}
	if s.fell || Home(key, s.n) != s.self {
		return s.floor
	}
	return Whole - int64(s.n-1)*s.floor
}

// Observe adds local traffic for key: asked tokens were requested and
// spent of them admitted. A key asked for outside its home region becomes
// shared.
func (t *Table) Observe(key string, asked, spent int64) {
	k := t.key(key)
	k.asked += asked
	k.spent += spent
	if asked > 0 && Home(key, len(t.regions)) != t.self {
		k.shared = true
	}
}

// Heard records contact from region i at now (a request that arrived).
func (t *Table) Heard(i int, now int64) {
	if i >= 0 && i < len(t.heard) {
		t.heard[i] = max(t.heard[i], now)
	}
}

// RoundTrip records a successful exchange this region made with region i.
func (t *Table) RoundTrip(i int, now int64) {
	if i >= 0 && i < len(t.ok) {
		t.ok[i] = max(t.ok[i], now)
		t.heard[i] = max(t.heard[i], now)
	}
}

// Merge takes records for key from peer region from (its own and those it
// relays).
// A newer record replaces the held one; a record of this region newer than
// its own (written by a previous owner of the key) is adopted. Malformed
// records are ignored.
func (t *Table) Merge(from int, key string, recs []Record) {
	if g, ok := t.gone[key]; ok && t.topGen(0, recs) < g.gen {
		return // records of a generation this region left and dropped
	}
	k := t.key(key)
	if g := t.topGen(k.gen, recs); g > k.gen {
		// The regions reset the key while this one was behind (or had
		// dropped it): start the new generation's ledger.
		k = t.renew(key, k, g)
	}
	k.shared = true
	fresh, claimAt := k.fresh && idle(&k.recs[t.self]), int64(0)
	for i := range recs {
		r := &recs[i]
		if !r.valid(len(t.regions)) || r.Gen != k.gen {
			continue
		}
		if r.Origin == t.self {
			if (k.fresh && idle(&k.recs[t.self])) || r.Seq > k.recs[t.self].Seq {
				seq := k.recs[t.self].Seq
				k.recs[t.self] = r.clone()
				k.recs[t.self].Seq = max(seq, r.Seq)
			}
			continue
		}
		claimAt = max(claimAt, r.ClaimSeq[t.self])
		if r.Origin == from {
			k.direct[from] = max(k.direct[from], r.Seq)
		}
		if k.have[r.Origin] && r.Seq <= k.recs[r.Origin].Seq {
			continue
		}
		k.recs[r.Origin] = r.clone()
		k.have[r.Origin] = true
	}
	if me := &k.recs[t.self]; t.minority {
		// In the minority (as at the last step), an adopted record
		// keeps at most the floor too, as the step would.
		if excess := held(t.initial(key, t.self), me) - t.cfg.Floor; excess > 0 {
			me.Surrendered += excess
			me.SurrenderSeq = me.Seq + 1
			copy(me.SurrenderGranted, me.Granted)
			me.Held = held(t.initial(key, t.self), me)
		}
	} else if fresh && claimAt > me.SurrenderSeq {
		// The majority claimed from a record of this region that the
		// ledger this table starts from shows no surrender after (a key
		// it had not held, had dropped, or holds from a relay older than
		// the claim): it holds the floor until it may restore.
		if excess := held(t.initial(key, t.self), me) - t.cfg.Floor; excess > 0 {
			me.Surrendered += excess
			me.SurrenderSeq = max(me.Seq+1, claimAt)
			copy(me.SurrenderGranted, me.Granted)
			me.Held = held(t.initial(key, t.self), me)
		}
	}
	k.fresh = false
}

// Adopt takes key's records from this region's previous owner of the key
// (a hand-on inside the region when ownership moved): this region's record
// replaces the one held when that has moved no share yet or is older, the
// other regions' records merge as in Merge. The key is shared from then
// on (only shared keys are handed on).
func (t *Table) Adopt(key string, recs []Record) {
	if g, ok := t.gone[key]; ok && t.topGen(0, recs) < g.gen {
		return
	}
	k := t.key(key)
	if g := t.topGen(k.gen, recs); g > k.gen {
		k = t.renew(key, k, g)
	}
	k.shared = true
	for i := range recs {
		r := &recs[i]
		if !r.valid(len(t.regions)) || r.Gen != k.gen {
			continue
		}
		if r.Origin == t.self {
			if me := &k.recs[t.self]; idle(me) || r.Seq > me.Seq {
				seq := me.Seq
				k.recs[t.self] = r.clone()
				k.recs[t.self].Seq = max(seq, r.Seq)
			}
			continue
		}
		if k.have[r.Origin] && r.Seq <= k.recs[r.Origin].Seq {
			continue
		}
		k.recs[r.Origin] = r.clone()
		k.have[r.Origin] = true
	}
	k.fresh = false
}

// idle reports whether a record has moved no share yet.
func idle(r *Record) bool {
	for i := range r.Granted {
		if r.Granted[i] != 0 || r.Received[i] != 0 || r.Claimed[i] != 0 {
			return false
		}
	}
	return r.Surrendered == 0
}

// Outbox returns every shared key's records (this region's and the ones it
// relays), to send to each peer region.
func (t *Table) Outbox() map[string][]Record {
	out := map[string][]Record{}
	for key, k := range t.keys {
		if !k.shared {
			continue
		}
		var rs []Record
		for i := range k.recs {
			if k.have[i] {
				rs = append(rs, k.recs[i].clone())
			}
		}
		out[key] = rs
	}
	return out
}

// Records returns the records held for key (nil if the key is unknown).
func (t *Table) Records(key string) []Record {
	k := t.keys[key]
	if k == nil {
		return nil
	}
	var rs []Record
	for i := range k.recs {
		if k.have[i] {
			rs = append(rs, k.recs[i].clone())
		}
	}
	return rs
}

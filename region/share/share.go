package share

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Whole is the global limit of a key, in shares: a region holding Whole/4
// admits a quarter of the global rate and burst.
const Whole int64 = 1_000_000

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("share: invalid config")

// Config describes the regions and the allocator's timing. Every region
// must be configured with the same Regions.
type Config struct {
	// Regions names every region, this one included; order does not
	// matter (the table sorts them).
	Regions []string
	// Self is this region's name (one of Regions).
	Self string
	// Floor is the share every region keeps whatever its demand, so a quiet
	// region still admits (default Whole/100: 1% of the limit).
	Floor int64
	// IdleFloor is the share a region that reports no demand for a key
	// is asked to keep (default Floor/10): the rest of its floor goes to
	// the regions that use the key, so a quiet region costs the busy ones
	// 0.1% of the limit rather than 1%. It still admits its part of the
	// burst at once, and is moved back up to Floor plus its demand's part
	// as soon as it reports demand. Surrender and claims keep Floor.
	IdleFloor int64
	// MinMove is the smallest surplus a region gives away in one step
	// (default Whole/500), so shares do not churn on noise.
	MinMove int64
	// LostAfter: a region without a successful round trip to a majority of
	// the regions (itself included) for this long is in the minority and
	// surrenders every share down to the floor (default 3s).
	LostAfter time.Duration
	// ClaimAfter: a region not heard from for this long is lost; once the
	// majority agrees (every region in it reports the same lost set and
	// the same last record of the lost region) each of them claims
	// 1/(regions-1) of the lost region's share above its floor (default
	// LostAfter + 2s; must exceed LostAfter by more than one exchange
	// round trip and one interval).
	ClaimAfter time.Duration
	// Interval is how often the caller steps the table and exchanges
	// (default 250ms); it bounds how long after its last record a lost
	// region can take to surrender.
	Interval time.Duration
	// IdleAfter: a key this region has not been asked for in this long is
	// dropped at a step when dropping it changes nothing: its own record
	// has moved no share, no region's record it holds grants it any or
	// reports demand, and this region is not in the minority (default
	// 1m; see Step). A dropped key that is asked for again starts from
	// the same initial share it held. A key whose share moved is reset
	// to a new generation first, once every region agrees (see Step).
	IdleAfter time.Duration
	// GoneFor is how long a region remembers the generation of a key it
	// dropped after a reset (about 100 bytes a key rather than the
	// ledger's 2 KB), ignoring records of older generations of it. It
	// must exceed the longest time a record can spend in flight (an
	// exchange's deadline, 1s by default): a record of an older
	// generation delivered later than this would start the old ledger
	// again (default 10m).
	GoneFor time.Duration
}

// DefaultConfig returns the defaults for the given regions.
func DefaultConfig(self string, regions []string) Config {
	return Config{Regions: regions, Self: self, Floor: Whole / 100, IdleFloor: Whole / 1000, MinMove: Whole / 500,
		LostAfter: 3 * time.Second, ClaimAfter: 5 * time.Second, Interval: 250 * time.Millisecond, IdleAfter: time.Minute,
		GoneFor: 10 * time.Minute}
}

// MaxRegions is the most regions one global quota is shared among. With
// five or more, a majority can remain after two regions are cut off
// together, and one that granted share to the other before the cut is
// claimed from at a record that predates the grant while the receiver
// later restores it: the shares then add up to more than the limit
// (TestTwoLostRegionsTrade, docs/design.md "Known limits"). With four or
// fewer, two lost regions leave no majority to claim, and the bound holds
// (TestPropertyBound). A variable so that tests can study five.
var MaxRegions = 4

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if len(c.Regions) < 1 {
		return fmt.Errorf("%w: no regions", ErrConfig)
	}
	if len(c.Regions) > MaxRegions {
		return fmt.Errorf("%w: %d regions: at most %d share a global quota (with more, two regions cut off together can break the global bound; docs/design.md)", ErrConfig, len(c.Regions), MaxRegions)
	}
	seen := map[string]bool{}
	for _, r := range c.Regions {
		if r == "" {
			return fmt.Errorf("%w: empty region name", ErrConfig)
		}
		if seen[r] {
			return fmt.Errorf("%w: region %q listed twice", ErrConfig, r)
		}
		seen[r] = true
	}
	if !seen[c.Self] {
		return fmt.Errorf("%w: self %q is not among the regions", ErrConfig, c.Self)
	}
	if c.Floor < 0 || c.Floor*int64(len(c.Regions)) > Whole {
		return fmt.Errorf("%w: floor %d: want 0..%d for %d regions", ErrConfig, c.Floor, Whole/int64(len(c.Regions)), len(c.Regions))
	}
	if c.IdleFloor < 0 || c.IdleFloor > c.Floor {
		return fmt.Errorf("%w: idle floor %d: want 0..floor (%d)", ErrConfig, c.IdleFloor, c.Floor)
	}
	if c.MinMove < 0 {
		return fmt.Errorf("%w: min move must be >= 0", ErrConfig)
	}
	if c.LostAfter <= 0 || c.ClaimAfter <= c.LostAfter || c.Interval <= 0 {
		return fmt.Errorf("%w: want 0 < lost-after < claim-after and interval > 0", ErrConfig)
	}
	if c.IdleAfter < 0 {
		return fmt.Errorf("%w: idle-after must be >= 0 (0: keys are never dropped)", ErrConfig)
	}
	if c.IdleAfter > 0 && c.GoneFor <= 0 {
		return fmt.Errorf("%w: gone-for must be > 0 when keys are dropped", ErrConfig)
	}
	return nil
}

// Record is one region's state for one key, as the region itself last
// wrote it (Seq orders them). All slices are indexed by region (the
// table's sorted Regions) and are cumulative, so a record may be delivered
// late, twice or never, and a newer one replaces it.
type Record struct {
	Origin int
	Seq    int64 // origin's clock at the step that wrote it (strictly increasing)
	Held   int64 // the origin's share, in shares of Whole
	Demand int64 // tokens asked per interval, smoothed, ×demandScale
	Spent  int64 // tokens admitted in the last interval

	Granted     []int64 // given to each region
	Received    []int64 // taken from each region's grants
	Claimed     []int64 // claimed from each lost region
	ClaimSeq    []int64 // per region: the Seq+1 of the record a claim was made at
	Surrendered int64   // given up (to the floor) while in the minority
	// SurrenderSeq is the Seq of the last step in the minority, and
	// SurrenderGranted the Granted vector then: grants made before it that
	// a region which declared the origin lost had not seen are void.
	SurrenderSeq     int64
	SurrenderGranted []int64
	// Seen, per region: the Seq of its record the origin holds.
	Seen []int64
	// Restored is share surrendered and taken back once every region had
	// seen the surrender and no claim covered it; RestoreSurrendered and
	// RestoreClaimed are Surrendered and each region's Claimed[origin] at
	// the last restore.
	Restored           int64
	RestoreSurrendered int64
	RestoreClaimed     []int64
	// Voided, per region: the share that region granted this origin
	// which the origin will never take (granted after the record it
	// declared the region lost at, before the region's surrender);
	// RestoreVoided is each region's Voided[origin] at the last restore.
	// A region restoring adds back what others voided of its grants, so
	// a void that no claim covered is not lost.
	Voided        []int64
	RestoreVoided []int64
	Minority      bool
	// Lost, per region: 0 if the origin hears from it, else the Seq+1 of
	// the region's record the origin holds (1: none).
	Lost []int64
	// Gen is the key's ledger generation: a reset starts a new ledger
	// from the initial shares, and a region ignores records of an older
	// generation than its own (0: the first; records from peers that
	// predate generations read as 0).
	Gen int64
	// Capped: the origin holds at most its initial share of the key for
	// the rest of this generation and votes to start the next (Step).
	Capped bool
}

const demandScale = 1024

func (r *Record) clone() Record {
	c := *r
	c.Granted = slices.Clone(r.Granted)
	c.Received = slices.Clone(r.Received)
	c.Claimed = slices.Clone(r.Claimed)
	c.ClaimSeq = slices.Clone(r.ClaimSeq)
	c.Lost = slices.Clone(r.Lost)
	c.SurrenderGranted = slices.Clone(r.SurrenderGranted)
	c.Seen = slices.Clone(r.Seen)
	c.RestoreClaimed = slices.Clone(r.RestoreClaimed)
	c.Voided = slices.Clone(r.Voided)
	c.RestoreVoided = slices.Clone(r.RestoreVoided)
	return c
}

func (r *Record) valid(n int) bool {
	return r.Origin >= 0 && r.Origin < n && len(r.Granted) == n && len(r.Received) == n &&
		len(r.Claimed) == n && len(r.ClaimSeq) == n && len(r.Lost) == n && len(r.SurrenderGranted) == n &&
		len(r.Seen) == n && len(r.RestoreClaimed) == n && len(r.Voided) == n && len(r.RestoreVoided) == n
}

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

// held computes a record's share from its ledger.
func held(init int64, r *Record) int64 {
	h := init - r.Surrendered + r.Restored
	for i := range r.Granted {
		h += r.Received[i] + r.Claimed[i] - r.Granted[i]
	}
	return h
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

// Step runs one interval at now: it takes grants addressed to this region,
// surrenders in the minority, claims from lost regions when the majority
// agrees, gives surplus share toward demand, and writes this region's
// records.
//
// A key this region has not asked for in IdleAfter is dropped at the
// step when its ledger is one a fresh key would have here: this region
// moved no share of it (granted, received, claimed or surrendered none),
// no region's record it holds grants it any or reports demand, and it is
// not in the minority. Asked for again, the key starts from the same
// initial share, and its first record replaces the old one at the peers
// with the same ledger, so dropping never changes a share (the bound
// holds). A key whose share moved is kept: its ledger is cumulative and
// the other regions' ledgers refer to it.
func (t *Table) Step(now int64) {
	t.minority = t.cutOff(now)
	t.fell = t.minority
	for key, k := range t.keys {
		if t.switchable(k) {
			k = t.renew(key, k, k.gen+1)
		}
		t.stepKey(key, k, now)
		if t.droppable(k, now) {
			delete(t.keys, key)
			if k.gen > 0 {
				t.gone[key] = tombstone{gen: k.gen, at: now}
			}
		}
	}
	for key, g := range t.gone {
		if now-g.at > int64(t.cfg.GoneFor) {
			delete(t.gone, key)
		}
	}
}

// droppable reports whether key state k can be dropped at now (Step).
func (t *Table) droppable(k *keyState, now int64) bool {
	if t.cfg.IdleAfter <= 0 || t.minority || now-k.lastAsk < int64(t.cfg.IdleAfter) || !idle(&k.recs[t.self]) ||
		k.recs[t.self].Capped {
		return false
	}
	for i := range k.recs {
		if r := &k.recs[i]; r.Demand != 0 || (i != t.self && r.Granted[t.self] != 0) || k.capSeq[i] != 0 ||
			(k.gen > 0 && !k.have[i]) {
			// After a reset, a region keeps the key until it holds every
			// region's record of the new generation: the regions still
			// capped in the old one learn of the new one from its records.
			return false
		}
	}
	return true
}

// switchable reports whether key state k can start its next generation:
// every region's record of this one, this region's included, is capped,
// so each region holds at most its initial share until it has left this
// generation, and the initial shares add up to Whole.
func (t *Table) switchable(k *keyState) bool {
	for i := range k.recs {
		if !k.have[i] || !k.recs[i].Capped {
			return false
		}
	}
	return true
}

// capping reports whether this region caps key state k at this step: a
// region's record of this generation is capped (it joins the reset), or
// it proposes one: the key's share moved (so dropping it is not enough),
// no region has asked for it in IdleAfter by every record held (this
// region's own asks, every region's reported demand), every region is
// heard from and none is capped lost, and this region is not in the
// minority.
func (t *Table) capping(k *keyState, now int64) bool {
	for i := range k.recs {
		if k.have[i] && k.recs[i].Capped {
			return true
		}
	}
	if t.cfg.IdleAfter <= 0 || t.minority || now-k.lastAsk < int64(t.cfg.IdleAfter) || idle(&k.recs[t.self]) {
		return false
	}
	for i := range k.recs {
		if !k.have[i] || k.recs[i].Demand != 0 || k.recs[i].Minority || k.capSeq[i] != 0 ||
			(i != t.self && now-t.heard[i] > int64(t.cfg.LostAfter)) {
			return false
		}
	}
	return true
}

func (t *Table) stepKey(key string, k *keyState, now int64) {
	n := len(t.regions)
	me := &k.recs[t.self]
	// Targets use the demand this region last reported, the one its peers
	// see beside their own, so both sides compute from the same step.
	reported := me.Demand
	if k.asked > 0 || k.lastAsk == 0 {
		k.lastAsk = now
	}
	me.Demand = (me.Demand + k.asked*demandScale) / 2
	me.Spent = k.spent
	if !me.Capped && t.capping(k, now) {
		me.Capped = true
	}
	k.asked, k.spent = 0, 0
	me.Minority = t.minority
	lost := make([]bool, n)
	for i := range t.regions {
		me.Lost[i] = 0
		if i != t.self && now-t.heard[i] > int64(t.cfg.ClaimAfter) {
			lost[i] = true
			me.Lost[i] = k.recs[i].Seq + 1
			if k.capSeq[i] == 0 && !t.minority {
				k.capSeq[i], k.capGranted[i] = k.recs[i].Seq+1, k.recs[i].Granted[t.self]
			}
		}
		if r := &k.recs[i]; k.capSeq[i] != 0 && !lost[i] {
			switch {
			case r.SurrenderSeq >= k.capSeq[i]:
				// It surrendered since: what it granted between the
				// record the majority may have claimed at and the
				// surrender may have been counted in the claims.
				k.recs[t.self].Voided[i] += max(0, r.SurrenderGranted[t.self]-k.capGranted[i])
				k.capSeq[i] = 0
			case k.direct[i] >= k.capSeq[i]:
				// It answered itself with a newer record and has not
				// surrendered since: it never was in the minority, so
				// no claim at the capped record was or can be made.
				k.capSeq[i] = 0
			}
		}
	}

	if t.minority {
		// Cut off from the majority: keep at most the floor; take, claim
		// and give nothing until back.
		if h := held(t.initial(key, t.self), me); h > t.cfg.Floor {
			me.Surrendered += h - t.cfg.Floor
		}
		me.SurrenderSeq = max(me.Seq+1, now)
		copy(me.SurrenderGranted, me.Granted)
		t.write(key, k, now)
		return
	}

	t.take(k)

	// Claim from lost regions once the majority agrees.
	t.claim(key, k, lost)
	t.restore(k)

	t.write(key, k, now)
	t.give(key, k, now, lost, reported)
}

// give moves this region's surplus above its target toward the regions
// below theirs, among the regions that take part (not lost, not in the
// minority, reached within LostAfter); reported is the demand this region
// last reported. It reports whether it gave any.
func (t *Table) give(key string, k *keyState, now int64, lost []bool, reported int64) bool {
	n := len(t.regions)
	me := &k.recs[t.self]
	active := make([]bool, n)
	views := make([]int64, n)
	var pool, demand int64
	count := int64(0)
	for i := range t.regions {
		r := &k.recs[i]
		if lost[i] || r.Minority || (i != t.self && now-t.ok[i] > int64(t.cfg.LostAfter)) {
			continue
		}
		active[i] = true
		views[i] = t.view(k, i, lost)
		pool += views[i]
		if i == t.self {
			demand += reported
		} else {
			demand += r.Demand
		}
		count++
	}
	if demand <= 0 || count < 2 {
		return false
	}
	dem := func(i int) int64 {
		if i == t.self {
			return reported
		}
		return k.recs[i].Demand
	}
	floor := func(i int) int64 {
		if dem(i) <= 0 {
			return t.cfg.IdleFloor
		}
		return t.cfg.Floor
	}
	spare := pool
	for i := range t.regions {
		if active[i] {
			spare -= floor(i)
		}
	}
	if spare < 0 {
		return false
	}
	target := func(i int) int64 {
		return floor(i) + int64(float64(spare)*float64(dem(i))/float64(demand))
	}
	surplus := me.Held - target(t.self)
	if surplus <= t.cfg.MinMove {
		return false
	}
	var deficit int64
	defs := make([]int64, n)
	for i := range t.regions {
		if i != t.self && active[i] {
			if d := target(i) - views[i]; d > 0 {
				defs[i] = d
				deficit += d
			}
		}
	}
	if deficit <= 0 {
		return false
	}
	for i, d := range defs {
		if d > 0 {
			me.Granted[i] += min(d, int64(float64(surplus)*float64(d)/float64(deficit)))
		}
	}
	t.writeMoved(key, k, now)
	return true
}

// take takes what the other regions granted this one and it has not
// taken yet (up to the cap of a region it declared lost, less what it
// voided); it reports whether it took any.
func (t *Table) take(k *keyState) bool {
	me := &k.recs[t.self]
	took := false
	for i := range t.regions {
		if i != t.self && k.have[i] {
			granted := k.recs[i].Granted[t.self]
			if k.capSeq[i] != 0 {
				granted = min(granted, k.capGranted[i])
			}
			if avail := granted - me.Voided[i] - me.Received[i]; avail > 0 {
				me.Received[i] += avail
				took = true
			}
		}
	}
	return took
}

// Take takes, between steps, the grants addressed to this region that
// the records merged since carry, so a move costs the time from the
// giver's step to the record's arrival (one exchange) rather than to the
// receiver's next step (up to one more interval), during which the share
// is held by no region. It takes exactly what the next step would take
// first: nothing while this region is, or at now would be, in the
// minority, or counts any region lost or capped (the step handles those
// with their voids). Like Rebalance it leaves Seen as the step wrote it:
// Seen says which records a step acted on (voids, restores), and a take
// acts on no surrender. It reports whether this region's share changed.
func (t *Table) Take(key string, now int64) bool {
	k := t.keys[key]
	if k == nil || t.minority || t.cutOff(now) {
		return false
	}
	for i := range t.regions {
		if i != t.self && (now-t.heard[i] > int64(t.cfg.ClaimAfter) || k.capSeq[i] != 0) {
			return false
		}
	}
	if !t.take(k) {
		return false
	}
	t.writeMoved(key, k, now)
	return true
}

// Rebalance gives key's share above the floor toward the regions that
// ask for it between steps, right after a peer's records arrived, when
// this region does not use the key itself (it reported no demand): an
// answer carries the grant back at once rather than at the next step, so
// a key homed in a quiet region reaches the regions that use it one
// round trip after their first exchange. Regions that use the key move
// share at steps only (all from the same step's records, which keeps
// them from chasing each other's stale views). It gives nothing while
// this region is in the minority or counts any region lost (the step
// handles those). It reports whether any share moved.
func (t *Table) Rebalance(key string, now int64) bool {
	k := t.keys[key]
	if k == nil || k.recs[t.self].Demand != 0 || k.asked != 0 || t.minority || t.cutOff(now) {
		return false
	}
	lost := make([]bool, len(t.regions))
	for i := range t.regions {
		if i != t.self && (now-t.heard[i] > int64(t.cfg.ClaimAfter) || k.capSeq[i] != 0) {
			return false
		}
	}
	return t.give(key, k, now, lost, k.recs[t.self].Demand)
}

// cutOff reports whether at now this region has gone LostAfter without a
// round trip to a majority of the regions.
func (t *Table) cutOff(now int64) bool {
	reached := 1
	for i := range t.regions {
		if i != t.self && now-t.ok[i] <= int64(t.cfg.LostAfter) {
			reached++
		}
	}
	return 2*reached <= len(t.regions)
}

// view is region i's share as this region expects it once i has seen what
// this region sent: its last record, plus grants from this region it has
// not taken yet, plus the claims it will make from regions lost with the
// agreement this region already acted on. Using it, two regions do not
// both give toward the same stale picture.
func (t *Table) view(k *keyState, i int, lost []bool) int64 {
	r := &k.recs[i]
	if i == t.self {
		return r.Held
	}
	me := &k.recs[t.self]
	v := r.Held + max(0, me.Granted[i]-r.Received[t.self])
	for j := range lost {
		if lost[j] && me.ClaimSeq[j] == k.recs[j].Seq+1 && r.ClaimSeq[j] < me.ClaimSeq[j] {
			if excess := k.recs[j].Held - t.cfg.Floor; excess > 0 {
				v += excess / t.claimParts()
			}
		}
	}
	return v
}

// claim takes, for each region this one counts as lost, 1/(regions-1) of
// that region's share above its floor, when the regions still heard from
// are a majority and each of them reports the same lost set and the same
// last record of every lost region (so they all claim from the same
// ledger). The part is one of every other region's, not of the regions
// this one hears from: two regions may claim at the same record under
// different majorities (one counted the lost region lost later, having
// heard from it later, for instance through a request that arrived late,
// and was cut off in the step it claimed), and claims at one record, at
// most one per region, must not add up to more than it held. With more
// than one region lost, the parts of the regions also lost stay
// unclaimed until one of them is back and claims it, or the lost region
// is back and restores what was not claimed.
func (t *Table) claim(key string, k *keyState, lost []bool) {
	n := len(t.regions)
	me := &k.recs[t.self]
	var alive []int
	anyLost := false
	for i := range t.regions {
		if lost[i] {
			anyLost = true
		} else {
			alive = append(alive, i)
		}
	}
	if !anyLost || 2*len(alive) <= n {
		return
	}
	for _, s := range alive {
		if s == t.self {
			continue
		}
		r := &k.recs[s]
		if !k.have[s] || r.Minority {
			return
		}
		for i := range t.regions {
			want := int64(0)
			if lost[i] {
				want = k.recs[i].Seq + 1
			}
			if r.Lost[i] != want {
				return
			}
		}
	}
	for j := range t.regions {
		if !lost[j] || me.ClaimSeq[j] >= k.recs[j].Seq+1 {
			continue
		}
		me.ClaimSeq[j] = k.recs[j].Seq + 1
		if excess := k.recs[j].Held - t.cfg.Floor; excess > 0 {
			me.Claimed[j] += excess / t.claimParts()
		}
	}
}

// restore takes back share this region surrendered in the minority, less
// what the majority claimed from it, plus what the others voided of its
// grants (given after the record they declared it lost at: counted in
// claims when claims were made, lost otherwise), once every other
// region's record (direct or relayed) shows it has seen the surrender and
// does not count this region as lost: no claim against the records before
// the surrender can follow, and each region's void for it is final (a
// region voids in the step it first sees the surrender while hearing from
// this one, the step that writes Seen and Lost so).
func (t *Table) restore(k *keyState) {
	me := &k.recs[t.self]
	var newVoids int64
	for p := range t.regions {
		if p != t.self && k.have[p] {
			newVoids += k.recs[p].Voided[t.self] - me.RestoreVoided[p]
		}
	}
	// A minority step that had nothing above the floor to surrender still
	// moves SurrenderSeq, and the others void the grants before it: those
	// come back here too.
	if me.Surrendered <= me.RestoreSurrendered && newVoids <= 0 {
		return
	}
	var claims, voided int64
	for p := range t.regions {
		if p == t.self {
			continue
		}
		r := &k.recs[p]
		if !k.have[p] || r.Seen[t.self] < me.SurrenderSeq || r.Lost[t.self] != 0 {
			return
		}
		claims += r.Claimed[t.self] - me.RestoreClaimed[p]
		voided += r.Voided[t.self] - me.RestoreVoided[p]
	}
	if back := me.Surrendered - me.RestoreSurrendered - claims + voided; back > 0 {
		me.Restored += back
	}
	me.RestoreSurrendered = me.Surrendered
	for p := range t.regions {
		if p != t.self {
			me.RestoreClaimed[p] = k.recs[p].Claimed[t.self]
			me.RestoreVoided[p] = k.recs[p].Voided[t.self]
		}
	}
}

// write updates this region's record after a step: its share, a new Seq
// and Seen (the records the step acted on).
func (t *Table) write(key string, k *keyState, now int64) {
	t.writeMoved(key, k, now)
	me := &k.recs[t.self]
	for i := range me.Seen {
		me.Seen[i] = k.recs[i].Seq
	}
}

// writeMoved updates the share and Seq after share moved, leaving Seen
// as the last step wrote it: between steps (Rebalance) records merged
// since have not been acted on (a void for a surrender they show is
// computed at the next step), and a region that reads Seen as "has acted
// on my surrender" must not restore before that.
func (t *Table) writeMoved(key string, k *keyState, now int64) {
	me := &k.recs[t.self]
	me.Held = held(t.initial(key, t.self), me)
	me.Seq = max(me.Seq+1, now)
}

// claimParts is what a claim divides a lost region's share above the
// floor by: every other region, whichever of them the claimer hears from
// (see claim).
func (t *Table) claimParts() int64 { return int64(len(t.regions) - 1) }

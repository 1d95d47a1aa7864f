package share

import (
	"errors"
	"fmt"
	"time"
)

// Whole is the global limit of a key, in shares: a region holding Whole/4
// admits a quarter of the global rate and burst.
const Whole int64 = 1_000_000

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("invalid share config")

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

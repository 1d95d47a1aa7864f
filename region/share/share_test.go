package share

import (
	"errors"
	"fmt"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	base := DefaultConfig("eu", []string{"eu", "us", "ap"})
	for name, mut := range map[string]func(*Config){
		"no regions":     func(c *Config) { c.Regions = nil },
		"self missing":   func(c *Config) { c.Self = "sa" },
		"duplicate":      func(c *Config) { c.Regions = []string{"eu", "eu"} },
		"empty name":     func(c *Config) { c.Regions = []string{"eu", ""} },
		"floor too high": func(c *Config) { c.Floor = Whole / 2 },
		"claim <= lost":  func(c *Config) { c.ClaimAfter = c.LostAfter },
		"five regions":   func(c *Config) { c.Regions = []string{"eu", "us", "ap", "sa", "af"} },
	} {
		c := base
		c.Regions = append([]string(nil), base.Regions...)
		mut(&c)
		if _, err := New(c, 0); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
	if _, err := New(base, 0); err != nil {
		t.Fatal(err)
	}
	four := DefaultConfig("eu", []string{"eu", "us", "ap", "sa"})
	if _, err := New(four, 0); err != nil {
		t.Fatalf("four regions: %v", err)
	}
}

// keyHomedAt returns a key whose home is region index i of n.
func keyHomedAt(i, n int) string {
	for k := 0; ; k++ {
		key := fmt.Sprintf("rule\x00key-%d", k)
		if Home(key, n) == i {
			return key
		}
	}
}

// TestSteps pins the ledger step by step for two regions: the home region
// starts with everything above the other's floor; unused there, it gives
// toward the other's demand as soon as that arrives, and the other takes
// the grant as the answer arrives (Take); under equal demand shares meet
// halfway.
func TestSteps(t *testing.T) {
	s := newSim(t, "a", "b")
	key := keyHomedAt(0, 2)
	floor, idle := Whole/100, Whole/1000
	steps := []struct {
		demand []int64
		want   []int64
	}{
		// b asks; a, which does not use the key, gives down to its idle
		// floor as soon as b's record arrives (Rebalance) and answers
		// with the grant; b takes it as the answer arrives.
		{[]int64{0, 100}, []int64{idle, Whole - idle}},
		{[]int64{0, 100}, []int64{idle, Whole - idle}},
		// Equal demand: b gives its surplus back over the next steps.
		{[]int64{100, 100}, []int64{floor, Whole - floor}},
		{[]int64{100, 100}, nil},
		{[]int64{100, 100}, nil},
		{[]int64{100, 100}, nil},
		{[]int64{100, 100}, nil},
		{[]int64{100, 100}, nil},
		{[]int64{100, 100}, nil},
		{[]int64{100, 100}, []int64{Whole / 2, Whole / 2}},
	}
	for i, st := range steps {
		s.step(key, st.demand)
		got := s.shares(key)
		if st.want == nil {
			continue
		}
		for r := range got {
			if d := got[r] - st.want[r]; d < -Whole/100 || d > Whole/100 {
				t.Fatalf("step %d: shares %v, want %v (±1%%)", i, got, st.want)
			}
		}
	}
}

// TestFollowsDemand: unequal demand from two of three regions moves the
// shares to floor + spare × demand share within a few intervals.
func TestFollowsDemand(t *testing.T) {
	for home := 0; home < 3; home++ {
		t.Run(fmt.Sprint("home", home), func(t *testing.T) {
			s := newSim(t, "a", "b", "c")
			key := keyHomedAt(home, 3)
			for range 20 {
				s.step(key, []int64{300, 100, 0})
			}
			floor := Whole / 100
			spare := Whole - 3*floor
			want := []int64{floor + spare*3/4, floor + spare/4, floor}
			got := s.shares(key)
			for r := range got {
				if d := got[r] - want[r]; d < -Whole/50 || d > Whole/50 {
					t.Fatalf("shares %v, want %v (±2%%)", got, want)
				}
			}
			if s.sum(key) < Whole-Whole/100 {
				t.Fatalf("shares %v add up to %d: share leaked", got, s.sum(key))
			}
		})
	}
}

// TestCutAndHeal: a cut between two regions that both still reach the
// third keeps the bound, moves nothing suddenly, and shares reconverge
// after the heal.
func TestCutAndHeal(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	key := keyHomedAt(2, 3)
	d := []int64{300, 100, 0}
	for range 20 {
		s.step(key, d)
	}
	s.cutLink(0, 1, true)
	d = []int64{100, 300, 0} // demand flips while a and b cannot talk
	for range 60 {
		s.step(key, d)
	}
	s.cutLink(0, 1, false)
	for range 20 {
		s.step(key, d)
	}
	floor := Whole / 100
	spare := Whole - 3*floor
	want := []int64{floor + spare/4, floor + spare*3/4, floor}
	got := s.shares(key)
	for r := range got {
		if dd := got[r] - want[r]; dd < -Whole/50 || dd > Whole/50 {
			t.Fatalf("after heal: shares %v, want %v (±2%%)", got, want)
		}
	}
}

// TestLostRegion: a region cut off from both others surrenders to its
// floor after LostAfter; after ClaimAfter the other two claim the rest;
// when it comes back it starts from the floor (no burst) and the shares
// follow demand again.
func TestLostRegion(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	key := keyHomedAt(2, 3)
	floor := Whole / 100
	d := []int64{100, 100, 100}
	for range 20 {
		s.step(key, d)
	}
	s.isolate(2, true)
	cfg := DefaultConfig("", nil)
	steps := int(int64(cfg.ClaimAfter)/interval) + 3
	for range steps {
		s.step(key, d)
	}
	got := s.shares(key)
	if got[2] > floor {
		t.Fatalf("isolated region holds %d > floor %d", got[2], floor)
	}
	if got[0]+got[1] < Whole-floor-Whole/100 {
		t.Fatalf("majority holds %v: the lost region's share was not claimed", got)
	}
	s.isolate(2, false)
	prev := got[2]
	for range 30 {
		s.step(key, d)
		if g := s.shares(key)[2]; g > prev+Whole/2 {
			t.Fatalf("returning region jumped from %d to %d in one step", prev, g)
		}
	}
	got = s.shares(key)
	for r := range got {
		if dd := got[r] - Whole/3; dd < -Whole/50 || dd > Whole/50 {
			t.Fatalf("after return: shares %v, want a third each (±2%%)", got)
		}
	}
}

// TestNewOwnerAdopts: a table that starts without a key (a new owner in
// its region) adopts its region's record relayed by a peer.
func TestNewOwnerAdopts(t *testing.T) {
	s := newSim(t, "a", "b")
	key := keyHomedAt(0, 2)
	for range 10 {
		s.step(key, []int64{0, 100})
	}
	before := s.shares(key)[0]
	fresh, err := New(DefaultConfig("a", []string{"a", "b"}), s.now)
	if err != nil {
		t.Fatal(err)
	}
	fresh.Merge(1, key, s.tabs[1].Records(key))
	if got := fresh.Share(key); got != before {
		t.Fatalf("new owner's share %d, want the relayed %d", got, before)
	}
}

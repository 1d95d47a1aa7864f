package test

import (
	"testing"
	"time"

	"github.com/weirlimit/weir/client"
	"github.com/weirlimit/weir/internal/testcluster"
)

// Long windows under lease: auto (the default), hammered from two SDK
// gateways as hard as TestAutoLease's hot key, which is leased: the SDK
// asks for no lease and holds none, for a period of an hour and for a
// calendar day. (Before, a monthly quota's hot key was leased a quarter of
// the month's tokens, which came back only at month end.)
func TestLongWindowsNotLeasedBySDK(t *testing.T) {
	c := testcluster.New(t, 1)
	ver := c.ApplyRules(`
rules:
  - {id: hourauto, match: {route: /hour}, key: apikey, rate: 720000, period: 1h, burst: 200, fail_mode: closed, timeout: 2s}
  - {id: dayauto, match: {route: /day}, key: apikey, algorithm: fixed_window, rate: 1000000, calendar: day, fail_mode: closed, timeout: 2s}
`)
	both := []*client.Client{autoLeaseClient(t, c, "gw-long-1", ver), autoLeaseClient(t, c, "gw-long-2", ver)}
	for _, rule := range []string{"hourauto", "dayauto"} {
		start := time.Now()
		admitted, _ := hammerKey(t, both, rule, "apikey:"+rule, func() bool { return time.Since(start) > 1500*time.Millisecond })
		if admitted == 0 {
			t.Fatalf("%s: nothing admitted", rule)
		}
		for i, cl := range both {
			if st := cl.Stats(); st.AutoLeases != 0 || st.LeaseHits != 0 {
				t.Fatalf("%s: gateway %d holds leases: %+v", rule, i+1, st)
			}
		}
	}
}

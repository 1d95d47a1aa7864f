package main

import (
	"strings"
	"testing"
)

// The bench's flags are checked before anything is spawned: a usage
// error exits 2 with the reason and prints nothing on stdout.
func TestBenchUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--spawn", "1", "--rate", "fast"}, `--rate "fast": checks per second ≥ 0 (0: closed loop) or a percentage such as 30%`},
		{[]string{"bench", "--spawn", "1", "--rate", "-5"}, `--rate "-5": checks per second`},
		{[]string{"bench", "--spawn", "1", "--rate", "0%"}, `--rate "0%": a percentage of capacity must be in (0%, 100%]`},
		{[]string{"bench", "--spawn", "1", "--rate", "130%"}, `--rate "130%": a percentage of capacity must be in (0%, 100%]`},
		{[]string{"bench", "--spawn", "3", "--scenario", "failover", "--rate", "30%"}, "--rate 30%: scenario failover kills, adds or spans clusters"},
		{[]string{"bench", "--spawn", "1", "--capacity-duration", "0s"}, "--capacity-duration > 0"},
		{[]string{"bench", "--spawn", "1", "--idle", "-1s"}, "--idle must be ≥ 0"},
		{[]string{"bench", "--target", "floor-udp"}, `--target "floor-udp": use sdk, http, rls, gateway, proxy, plainproxy, floor-grpc or floor-http`},
		{[]string{"bench", "--target", "sdk"}, "no target: give --spawn N or --cluster"},
		{[]string{"bench", "floor", "--kind", "udp"}, `--kind "udp": use grpc or http`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			r := runCLI(t, "", nil, tt.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) || r.stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit %d and %q", r.code, r.stdout, r.stderr, exitUsage, tt.want)
			}
		})
	}
}

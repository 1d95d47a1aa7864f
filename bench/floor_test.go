package bench

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// TestFloorSmoke spawns each floor server as `weir bench floor`, samples
// its idle CPU, and drives it briefly with its path's client: a
// count-bounded closed loop, then a paced run (capacity, then the open
// loop at half of it). Every call is answered without an error, the floor
// process is accounted under its role, and net/http's floor writes one
// response per call.
func TestFloorSmoke(t *testing.T) {
	bin := weirBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sc := Scenario{Name: "floor", Keys: 10, Cost: 1, Rules: []RuleSpec{{ID: "r", Rate: 10, Period: time.Second, Burst: 10}}}
	for _, kind := range []string{FloorGRPC, FloorHTTP} {
		t.Run(kind, func(t *testing.T) {
			fp, err := SpawnFloor(ctx, bin, kind, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer fp.Close()
			idle, err := IdleCPU(ctx, []int{fp.PID()}, 200*time.Millisecond)
			if err != nil || len(idle) != 1 || idle[0].CPUPct < 0 || idle[0].Switches < 0 {
				t.Fatalf("idle CPU %v, %v", idle, err)
			}
			f := RLSFactory([]string{fp.Addr})
			if kind == FloorHTTP {
				f = HTTPFactory([]string{fp.Addr}, 2, nil)
			}
			cfg := Config{Target: "floor-" + kind, Callers: 4, Gateways: 2, Count: 400, Seed: 1, Procs: Procs{RoleFloor: {fp.PID()}}}
			r, err := Run(ctx, cfg, sc, f)
			if err != nil {
				t.Fatal(err)
			}
			if r.Checks != 400 || r.Errors != 0 || r.Allowed != 400 {
				t.Fatalf("%d checks, %d errors (%s), %d allowed; want 400, 0, 400", r.Checks, r.Errors, r.FirstEr, r.Allowed)
			}
			srv := r.Server()
			if srv.Role != RoleFloor || srv.PerCall < 0 || srv.Writes <= 0 || srv.Reads <= 0 {
				t.Fatalf("floor server's share %+v (all: %+v)", srv, r.CPU)
			}
			if kind == FloorHTTP && (srv.Writes < 0.9 || srv.Writes > 1.5) {
				t.Errorf("net/http floor: %.2f writes a call, want about one", srv.Writes)
			}
			cfg.Count, cfg.Duration = 0, 300*time.Millisecond
			rs, err := RunPaced(ctx, cfg, sc, f, Pace{Pct: 50, Capacity: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != 2 || rs[0].Rate != 0 || rs[1].RatePct != 50 || rs[1].Capacity != rs[0].PerSec || rs[1].Rate != rs[0].PerSec*50/100 {
				t.Fatalf("paced runs: capacity %+v, open loop %+v", rs[0], rs[len(rs)-1])
			}
			if rs[0].Errors+rs[1].Errors != 0 || rs[1].Checks == 0 {
				t.Fatalf("paced runs: %d and %d errors, %d open-loop checks", rs[0].Errors, rs[1].Errors, rs[1].Checks)
			}
			t.Logf("%s: %.0f µs CPU, %.2f writes, %.2f reads, %.2f switches a call; capacity %.0f/s, open loop p50 %.0f µs",
				kind, srv.PerCall, srv.Writes, srv.Reads, srv.Switches, rs[0].PerSec, rs[1].P50us)
		})
	}
}

// Bad floor kinds are refused before anything starts.
func TestFloorBadKind(t *testing.T) {
	if _, err := SpawnFloor(context.Background(), "/nonexistent", "udp", 0, nil); !errors.Is(err, ErrInput) {
		t.Fatalf("SpawnFloor(udp) = %v, want ErrInput", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := ServeFloor(context.Background(), "udp", ln); !errors.Is(err, ErrInput) {
		t.Fatalf("ServeFloor(udp) = %v, want ErrInput", err)
	}
	if _, err := RunPaced(context.Background(), Config{}, Scenario{}, nil, Pace{Pct: 130, Capacity: time.Second}); !errors.Is(err, ErrInput) {
		t.Fatalf("RunPaced at 130%% = %v, want ErrInput", err)
	}
}

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/weirlimit/weir/bench"
)

// weirBench is one target's runs: against Weir through one path (sdk,
// http, rls, gateway, proxy), the plain proxy, or a protocol floor.
type weirBench struct {
	cfg        bench.Config
	sc         bench.Scenario
	run        string
	target     string
	perGateway int
	sdk        bench.SDKOptions
	logw       io.Writer
	tls        bool // spawn the cluster with mutual TLS
	procs      int  // --node-procs
	// self runs the floors; nodeBin the nodes and gateway processes.
	self, nodeBin string
	idle          time.Duration // --idle
	pace          bench.Pace
}

// benchServer is what a target's runs go against: a cluster (spawned or
// at seeds), a floor server, or nothing (the plain proxy).
type benchServer struct {
	seeds []string
	sp    *bench.Spawned
	floor *bench.FloorProc
	gwTLS *tls.Config
	procs bench.Procs
	// idle is the servers' background before any load (role idleRole).
	idle     []bench.Idle
	idleRole string
}

func (s *benchServer) close() {
	if s.sp != nil {
		s.sp.Close()
	}
	if s.floor != nil {
		s.floor.Close()
	}
}

// do runs against the cluster at seeds, or against a fresh cluster of
// spawn nodes (so one target's run leaves nothing to the next), or a
// fresh floor server.
func (wb weirBench) do(ctx context.Context, seeds []string, spawn int) ([]*bench.Result, error) {
	srv, err := wb.server(ctx, seeds, spawn)
	if err != nil {
		return nil, err
	}
	defer srv.close()
	cfg := wb.cfg
	cfg.KeyPrefix = wb.run + ":" + wb.target + ":"
	cfg.Procs = srv.procs
	if srv.sp != nil {
		cfg.Forwards = srv.sp.Forwards
	}
	factory, done, err := wb.factory(ctx, srv, &cfg)
	if err != nil {
		return nil, err
	}
	defer done()
	cfg.Midway = wb.midway(srv, cfg.KeyPrefix)
	rs, err := bench.RunPaced(ctx, cfg, wb.sc, factory, wb.pace)
	for _, r := range rs {
		r.Idle, r.IdleRole = srv.idle, srv.idleRole
	}
	return rs, err
}

// server starts what the target runs against and samples its idle CPU.
func (wb weirBench) server(ctx context.Context, seeds []string, spawn int) (*benchServer, error) {
	srv := &benchServer{seeds: seeds}
	var pids []int
	switch bt, _ := lookupTarget(wb.target); {
	case bt.floor != "":
		fp, err := bench.SpawnFloor(ctx, wb.self, bt.floor, nodeGOMAXPROCS(wb.procs, max(spawn, 1)), wb.logw)
		if err != nil {
			return nil, err
		}
		srv.floor, pids, srv.idleRole = fp, []int{fp.PID()}, bench.RoleFloor
	case wb.target == "plainproxy": // no check: no cluster
		return srv, nil
	case spawn > 0:
		sp, err := bench.SpawnCluster(ctx, wb.nodeBin, spawn, wb.logw, bench.SpawnOptions{TLS: wb.tls, Procs: nodeGOMAXPROCS(wb.procs, spawn)})
		if err != nil {
			return nil, err
		}
		srv.sp, srv.seeds, srv.gwTLS, pids, srv.idleRole = sp, sp.GRPCAddrs(), sp.GatewayTLS, sp.PIDs(), bench.RoleNodes
		yaml := wb.sc.RulesYAML()
		if wb.target == "rls" {
			yaml += wb.sc.RLSRulesYAML()
		}
		if err := bench.ApplyRules(ctx, sp.Nodes()[0].HTTP, yaml, wb.sc.RuleIDs(), srv.seeds, sp.AdminTLS, sp.GatewayTLS); err != nil {
			sp.Close()
			return nil, err
		}
	default:
		return srv, nil // a running cluster: not ours to meter
	}
	srv.procs = bench.Procs{srv.idleRole: pids}
	if wb.idle > 0 {
		idle, err := bench.IdleCPU(ctx, pids, wb.idle)
		if err != nil {
			srv.close()
			return nil, err
		}
		srv.idle = idle
	}
	return srv, nil
}

// factory makes the target's gateways; done releases what it started.
func (wb weirBench) factory(ctx context.Context, srv *benchServer, cfg *bench.Config) (f bench.Factory, done func(), err error) {
	label := ""
	if srv.gwTLS != nil {
		label = "+tls"
	}
	wb.sdk.TLS = srv.gwTLS
	done = func() {}
	bt, _ := lookupTarget(wb.target)
	cfg.Target = bt.label
	switch wb.target {
	case "sdk":
		cfg.Target, cfg.Leases = bt.label+label, true
		f = bench.SDKFactory(ctx, srv.seeds, wb.sdk)
	case "http":
		cfg.Target = bt.label + label
		cl, err := bench.ReadCluster(ctx, srv.seeds, srv.gwTLS)
		if err != nil {
			return nil, nil, err
		}
		f = bench.HTTPFactory(cl.HTTPAddrs(), wb.perGateway, srv.gwTLS)
	case "gateway", "proxy", "plainproxy":
		up, err := bench.StartUpstream()
		if err != nil {
			return nil, nil, err
		}
		done = up.Close
		f = bench.GatewayFactory(ctx, bench.GatewayOptions{Bin: wb.nodeBin, Seeds: srv.seeds, Upstream: up.Addr,
			Prefix: wb.run + "-" + wb.target, Conns: wb.perGateway, Check: wb.target == "gateway", Plain: wb.target == "plainproxy", Log: wb.logw})
	case "rls":
		f = bench.RLSFactory(srv.seeds)
	case "floor-grpc":
		f = bench.RLSFactory([]string{srv.floor.Addr})
	case "floor-http":
		f = bench.HTTPFactory([]string{srv.floor.Addr}, wb.perGateway, nil)
	}
	return f, done, nil
}

// midway is the scenario's event half-way through the run (nil: none).
func (wb weirBench) midway(srv *benchServer, keyPrefix string) func(context.Context) error {
	switch wb.sc.Event {
	case bench.EventKill:
		return func(ctx context.Context) error {
			cl, err := bench.ReadCluster(ctx, srv.seeds, srv.gwTLS)
			if err != nil {
				return err
			}
			victim := cl.Owner("apikey:" + keyPrefix + "0")
			fmt.Fprintf(os.Stderr, "bench: killing %s (owner of the first key) half-way\n", victim)
			return srv.sp.Kill(victim)
		}
	case bench.EventAdd:
		return func(context.Context) error {
			n, err := srv.sp.Add()
			if err == nil {
				fmt.Fprintf(os.Stderr, "bench: added node %s half-way\n", n.ID)
			}
			return err
		}
	}
	return nil
}

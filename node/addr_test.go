package node

import (
	"log/slog"
	"testing"
)

func TestAdvertiser(t *testing.T) {
	named := advertiser{name: "weir-0.weir-peers", ip: "10.1.2.3", host: "10.1.2.3"}
	none := advertiser{host: "127.0.0.1"}  // gossip bound to 127.0.0.1
	private := advertiser{host: "fd00::2"} // gossip bound to every address
	lost := advertiser{}                   // every address, no private IP found
	for _, tc := range []struct {
		a              advertiser
		bound, want    string
		raft, wantRaft string
		raftErr        bool
	}{
		{a: named, bound: "[::]:9090", want: "10.1.2.3:9090", raft: "0.0.0.0:7000", wantRaft: "weir-0.weir-peers:7000"},
		{a: named, bound: "127.0.0.1:9090", want: "10.1.2.3:9090", raft: "127.0.0.1:0", wantRaft: "weir-0.weir-peers:0"},
		{a: none, bound: "[::]:9091", want: "127.0.0.1:9091", raft: "127.0.0.1:7001", wantRaft: ""},
		{a: none, bound: "127.0.0.1:9091", want: "127.0.0.1:9091", raft: ":7001", wantRaft: "127.0.0.1:7001"},
		{a: private, bound: "0.0.0.0:8080", want: "[fd00::2]:8080", raft: "0.0.0.0:7000", wantRaft: "[fd00::2]:7000"},
		{a: lost, bound: "[::]:8080", want: "[::]:8080", raft: "0.0.0.0:7000", raftErr: true},
		{a: lost, bound: "10.0.0.1:8080", want: "10.0.0.1:8080", raft: "10.0.0.1:7000", wantRaft: ""},
	} {
		if got := tc.a.addr(tc.bound); got != tc.want {
			t.Errorf("%+v addr(%s) = %s, want %s", tc.a, tc.bound, got, tc.want)
		}
		got, err := tc.a.raft(tc.raft)
		if (err != nil) != tc.raftErr || got != tc.wantRaft {
			t.Errorf("%+v raft(%s) = %q, %v; want %q (error: %v)", tc.a, tc.raft, got, err, tc.wantRaft, tc.raftErr)
		}
	}
	cfg := DefaultConfig("n1")
	cfg.Advertise = "localhost"
	a, err := newAdvertiser(cfg, slog.New(slog.DiscardHandler))
	if err != nil || (a.ip != "127.0.0.1" && a.ip != "::1") || a.name != "localhost" {
		t.Fatalf("newAdvertiser(localhost) = %+v, %v", a, err)
	}
	cfg.Advertise = "no-such-host.invalid"
	cfg.ResolveTimeout = 0
	if _, err := newAdvertiser(cfg, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("an unresolvable advertise host was taken")
	}
}

func TestConfigAdvertise(t *testing.T) {
	for adv, ok := range map[string]bool{
		"": true, "10.0.0.5": true, "fd00::2": true, "weir-0.weir-peers.default.svc": true, "n1": true,
		"n1:7000": false, "0.0.0.0": false, "::": false, "http://n1": false, "[fd00::2]": false,
	} {
		cfg := DefaultConfig("n1")
		cfg.DataDir = "/tmp/x"
		cfg.Advertise = adv
		if err := cfg.Validate(); (err == nil) != ok {
			t.Errorf("Advertise %q: Validate() = %v, want ok %v", adv, err, ok)
		}
	}
}

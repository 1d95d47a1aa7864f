package membership

import (
	"log/slog"
	"testing"
	"time"
)

func TestAdvertiser(t *testing.T) {
	named := Advertiser{name: "weir-0.weir-peers", ip: "10.1.2.3", host: "10.1.2.3"}
	none := Advertiser{host: "127.0.0.1"}  // gossip bound to 127.0.0.1
	private := Advertiser{host: "fd00::2"} // gossip bound to every address
	lost := Advertiser{}                   // every address, no private IP found
	for _, tc := range []struct {
		a              Advertiser
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
		if got := tc.a.Addr(tc.bound); got != tc.want {
			t.Errorf("%+v addr(%s) = %s, want %s", tc.a, tc.bound, got, tc.want)
		}
		got, err := tc.a.Raft(tc.raft)
		if (err != nil) != tc.raftErr || got != tc.wantRaft {
			t.Errorf("%+v raft(%s) = %q, %v; want %q (error: %v)", tc.a, tc.raft, got, err, tc.wantRaft, tc.raftErr)
		}
	}
	a, err := NewAdvertiser("localhost", "127.0.0.1:0", time.Minute, slog.New(slog.DiscardHandler))
	if err != nil || (a.ip != "127.0.0.1" && a.ip != "::1") || a.name != "localhost" {
		t.Fatalf("NewAdvertiser(localhost) = %+v, %v", a, err)
	}
	if _, err := NewAdvertiser("no-such-host.invalid", "127.0.0.1:0", 0, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("an unresolvable advertise host was taken")
	}
}

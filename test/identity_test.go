package test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/internal/tlsconf"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// allPartitions is every partition of the default ring.
func allPartitions() []uint32 {
	ps := make([]uint32, 271)
	for i := range ps {
		ps[i] = uint32(i)
	}
	return ps
}

// TestIdentityNonMemberNodeCertOnPeer: a node certificate from the cluster
// CA for n9, which never joined, cannot take partitions with Peer.Handoff
// (PermissionDenied at every node, asked three times) nor forward checks;
// a member's certificate cannot ask for partitions it neither owns nor
// holds. Checks keep working through every node with their counters
// intact. (Before identities were bound to membership, the Handoff asks
// took the counters and made every check fail "owner n9 unreachable".)
func TestIdentityNonMemberNodeCertOnPeer(t *testing.T) {
	c := testcluster.NewWith(t, 3, testcluster.Options{TLS: true})
	c.ApplyRules(tlsRules)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	keys := make([]*weirv1.CheckItem, 40)
	for i := range keys {
		keys[i] = &weirv1.CheckItem{Key: fmt.Sprintf("apikey:id%d", i), Rule: "tls.r", Cost: 7}
	}
	gw := weirv1.NewLimiterClient(grpcConn(t, c.Live()[0].GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleGateway, "g1"))))
	resp, err := gw.Check(ctx, &weirv1.CheckRequest{Items: keys})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int64, len(keys))
	for i, r := range resp.Results {
		if r.GetError() != "" || !r.Allowed {
			t.Fatalf("%s: %+v", keys[i].Key, r)
		}
		want[i] = r.Remaining
	}

	n9 := c.PKI.ClientTLS(tlsconf.RoleNode, "n9")
	for round := 0; round < 3; round++ {
		for _, n := range c.Live() {
			peer := weirv1.NewPeerClient(grpcConn(t, n.GRPCAddr(), tlsCreds(n9)))
			if _, err := peer.Handoff(ctx, &weirv1.HandoffRequest{To: "n9", Partitions: allPartitions()}); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("Handoff to n9 at %s: %v, want PermissionDenied", n.ID(), err)
			}
			if round > 0 {
				continue // each refusal below waits for gossip a second first
			}
			if _, err := peer.Forward(ctx, &weirv1.CheckRequest{Items: keys[:1]}); status.Code(err) != codes.PermissionDenied {
				t.Errorf("Forward from n9 at %s: %v, want PermissionDenied", n.ID(), err)
			}
			if _, err := peer.Replicate(ctx, &weirv1.ReplicateRequest{From: "n9", States: []*weirv1.CounterState{{Id: 1, Partition: 1}}}); status.Code(err) != codes.PermissionDenied {
				t.Errorf("Replicate from n9 at %s: %v, want PermissionDenied", n.ID(), err)
			}
		}
	}
	// A member asking for every partition: it holds only its share.
	n1, n2 := c.Live()[0], c.Live()[1]
	asMember := weirv1.NewPeerClient(grpcConn(t, n1.GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleNode, n2.ID()))))
	if _, err := asMember.Handoff(ctx, &weirv1.HandoffRequest{To: n2.ID(), Partitions: allPartitions()}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Handoff of every partition to member %s: %v, want PermissionDenied", n2.ID(), err)
	}

	for i := range keys {
		keys[i].Cost = 0
	}
	for _, n := range c.Live() {
		lim := weirv1.NewLimiterClient(grpcConn(t, n.GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleGateway, "g1"))))
		resp, err := lim.Check(ctx, &weirv1.CheckRequest{Items: keys})
		if err != nil {
			t.Fatalf("check through %s: %v", n.ID(), err)
		}
		for i, r := range resp.Results {
			if r.GetError() != "" || r.Remaining != want[i] {
				t.Errorf("through %s, %s: remaining %d (err %q), want %d", n.ID(), keys[i].Key, r.Remaining, r.GetError(), want[i])
			}
		}
	}
}

// tlsRaftLayer dials Raft ports with a client certificate, as a node
// would; it accepts nothing.
type tlsRaftLayer struct {
	cfg  *tls.Config
	done chan struct{}
}

func (l tlsRaftLayer) Accept() (net.Conn, error) { <-l.done; return nil, net.ErrClosed }
func (l tlsRaftLayer) Close() error              { return nil }
func (l tlsRaftLayer) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (l tlsRaftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), l.cfg)
}

// TestIdentityNonMemberNodeCertOnRaft: with a node certificate for n9
// (never joined), RequestVote as n2 (and as n1) with ever higher terms
// every 250 ms, and AppendEntries and TimeoutNow as n9, are refused at
// every node: no node takes the forged terms, /readyz stays ready, and
// rule writes work. (Before the checks, the votes deposed the leader at will.)
func TestIdentityNonMemberNodeCertOnRaft(t *testing.T) {
	c := testcluster.NewWith(t, 3, testcluster.Options{TLS: true})
	c.ApplyRules(tlsRules)
	nodes := c.Live()
	leader, _ := nodes[0].Store().Leader()
	term := nodes[0].Store().Term()
	if leader == "" || term == 0 {
		t.Fatalf("leader %q term %d", leader, term)
	}
	done := make(chan struct{})
	tr := raft.NewNetworkTransport(tlsRaftLayer{cfg: c.PKI.ClientTLS(tlsconf.RoleNode, "n9"), done: done}, 3, 5*time.Second, io.Discard)
	defer func() { close(done); tr.Close() }()

	attack := time.Now().Add(3 * time.Second)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for i := uint64(1); time.Now().Before(attack); i++ {
		for _, n := range nodes {
			as := nodes[1]
			if n == as {
				as = nodes[0]
			}
			h := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(as.ID()), Addr: []byte(as.RaftAddr())}
			addr := raft.ServerAddress(n.RaftAddr())
			vote := &raft.RequestVoteRequest{RPCHeader: h, Term: term + 10*i, LastLogIndex: 1 << 40, LastLogTerm: term + 10*i}
			if err := tr.RequestVote(raft.ServerID(n.ID()), addr, vote, &raft.RequestVoteResponse{}); err == nil {
				t.Fatalf("RequestVote as %s at %s was answered", as.ID(), n.ID())
			}
			pre := &raft.RequestPreVoteRequest{RPCHeader: h, Term: term + 10*i, LastLogIndex: 1 << 40, LastLogTerm: term + 10*i}
			if err := tr.RequestPreVote(raft.ServerID(n.ID()), addr, pre, &raft.RequestPreVoteResponse{}); err == nil {
				t.Fatalf("RequestPreVote as %s at %s was answered", as.ID(), n.ID())
			}
			self := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n9"), Addr: []byte("127.0.0.1:1")}
			app := &raft.AppendEntriesRequest{RPCHeader: self, Term: term + 10*i, Leader: []byte("127.0.0.1:1")}
			if err := tr.AppendEntries(raft.ServerID(n.ID()), addr, app, &raft.AppendEntriesResponse{}); err == nil {
				t.Fatalf("AppendEntries from n9 at %s was answered", n.ID())
			}
			if err := tr.TimeoutNow(raft.ServerID(n.ID()), addr, &raft.TimeoutNowRequest{RPCHeader: self}, &raft.TimeoutNowResponse{}); err == nil {
				t.Fatalf("TimeoutNow from n9 at %s was answered", n.ID())
			}
		}
		<-tick.C
	}
	// The attack's terms were term+10 and up: a node that took one has
	// a term that high (an election of the loaded machine's own adds 1).
	for _, n := range nodes {
		if tm := n.Store().Term(); tm >= term+10 {
			t.Errorf("%s: term %d after the attack, was %d: a forged vote was taken", n.ID(), tm, term)
		}
		if l, _ := n.Store().Leader(); l != leader {
			t.Logf("%s: leader %q, was %q", n.ID(), l, leader)
		}
		testwait.For(t, 10*time.Second, n.ID()+" ready", func() error {
			resp, err := c.PKI.HTTPClient(tlsconf.RoleGateway, "g1").Get("https://" + n.HTTPAddr() + "/readyz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("/readyz %d", resp.StatusCode)
			}
			return nil
		})
	}
	c.ApplyRules(tlsRules + `  - id: tls.after
    match: {route: /y, method: GET, plan: "*"}
    key: apikey
    algorithm: token_bucket
    rate: 1
    period: 1h
    burst: 10
`)
}

// helloRaftLayer dials Raft ports in plain TCP and opens each connection
// with a node proof for id, as a node with the gossip key does.
type helloRaftLayer struct {
	tlsRaftLayer
	hello []byte
}

func (l helloRaftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(append([]byte{byte(len(l.hello) >> 8), byte(len(l.hello))}, l.hello...)); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// TestIdentityNonMemberKeyProof: with the gossip key (no TLS), a valid
// node proof for n9, which never joined, is refused on Peer.Handoff at
// every node, and its Raft votes as n2 (it proves n9) and appends as n9
// are refused; checks keep working and no node takes the forged terms.
func TestIdentityNonMemberKeyProof(t *testing.T) {
	k1 := peerauth.GenerateKey()
	c := wrapCluster(t, testcluster.NewWith(t, 3, testcluster.Options{Config: withKeys(k1)}))
	c.ApplyRules(exactRules)
	spent := c.checkOnce(c.Nodes[0], "apikey:victim", "exact", 40).Remaining
	auth := peerauth.New(testcluster.Name, keyring(t, k1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		p := outsiderPeer(t, n.GRPCAddr(), grpc.WithPerRPCCredentials(auth.Credentials("n9")))
		if _, err := p.Handoff(ctx, &weirv1.HandoffRequest{To: "n9", Partitions: allPartitions()}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("Handoff to n9 at %s: %v, want PermissionDenied", n.ID(), err)
		}
	}

	term := c.Nodes[0].Store().Term()
	done := make(chan struct{})
	tr := raft.NewNetworkTransport(helloRaftLayer{tlsRaftLayer{done: done}, []byte(auth.Token("n9"))}, 3, 5*time.Second, io.Discard)
	defer func() { close(done); tr.Close() }()
	for i, n := range c.Nodes {
		as := c.Nodes[(i+1)%3]
		h := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(as.ID()), Addr: []byte(as.RaftAddr())}
		vote := &raft.RequestVoteRequest{RPCHeader: h, Term: term + 100, LastLogIndex: 1 << 40, LastLogTerm: term + 100}
		if err := tr.RequestVote(raft.ServerID(n.ID()), raft.ServerAddress(n.RaftAddr()), vote, &raft.RequestVoteResponse{}); err == nil {
			t.Errorf("RequestVote as %s at %s was answered", as.ID(), n.ID())
		}
		self := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n9"), Addr: []byte("127.0.0.1:1")}
		app := &raft.AppendEntriesRequest{RPCHeader: self, Term: term + 100}
		if err := tr.AppendEntries(raft.ServerID(n.ID()), raft.ServerAddress(n.RaftAddr()), app, &raft.AppendEntriesResponse{}); err == nil {
			t.Errorf("AppendEntries from n9 at %s was answered", n.ID())
		}
	}
	for _, n := range c.Nodes {
		if tm := n.Store().Term(); tm >= term+100 {
			t.Errorf("%s: term %d, was %d: a forged request was taken", n.ID(), tm, term)
		}
	}
	if r := c.checkOnce(c.Nodes[2], "apikey:victim", "exact", 1); r.Remaining != spent-1 {
		t.Errorf("victim: remaining %d, want %d (its counter moved or reset)", r.Remaining, spent-1)
	}
	for i := range 30 {
		c.checkOnce(c.Nodes[i%3], fmt.Sprintf("apikey:k%d", i), "exact", 1) // fails the test on an error
	}
}

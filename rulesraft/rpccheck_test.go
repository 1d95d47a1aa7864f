package rulesraft

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// pipeLayer is a raft.StreamLayer over net.Pipe: a Dial hands the other
// end, put under the checks and recorded, to the layer's Accept.
type pipeLayer struct {
	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once
	accept func(net.Conn) net.Conn
	to     *pipeLayer // where Dial connects
	mu     sync.Mutex
	open   []net.Conn // both ends of every pipe, closed by Close
}

func newPipeLayer(accept func(net.Conn) net.Conn) *pipeLayer {
	return &pipeLayer{conns: make(chan net.Conn), done: make(chan struct{}), accept: accept}
}

func (l *pipeLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *pipeLayer) Close() error {
	l.once.Do(func() { close(l.done) })
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.open {
		c.Close()
	}
	return nil
}
func (l *pipeLayer) Addr() net.Addr { return advAddr("pipe:1") }
func (l *pipeLayer) Dial(raft.ServerAddress, time.Duration) (net.Conn, error) {
	a, b := net.Pipe()
	l.mu.Lock()
	l.open = append(l.open, a, b)
	l.mu.Unlock()
	select {
	case l.to.conns <- l.to.accept(b):
		return a, nil
	case <-l.to.done:
		return nil, net.ErrClosed
	}
}

// recConn records what is read through it.
type recConn struct {
	net.Conn
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (c recConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.buf.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

type fakeMembers map[string]string

func (m fakeMembers) RaftAddr(id string) (string, bool) { a, ok := m[id]; return a, ok }

// rig is a raft NetworkTransport that sends (client) to another that
// receives (server) through checkConn, as connection identity "n2".
type rig struct {
	client, server *raft.NetworkTransport
	mu             sync.Mutex
	wire           bytes.Buffer // bytes the checks read, in order
	refused        int
}

func newRig(t *testing.T, k *rpcCheck) *rig {
	t.Helper()
	r := &rig{}
	k.log = slog.New(slog.DiscardHandler)
	k.refused = func() { r.mu.Lock(); r.refused++; r.mu.Unlock() }
	server := newPipeLayer(func(c net.Conn) net.Conn {
		return k.wrap(recConn{Conn: c, mu: &r.mu, buf: &r.wire}, func() string { return "n2" })
	})
	client := newPipeLayer(nil)
	client.to = server
	r.server = raft.NewNetworkTransport(server, 1, 5*time.Second, io.Discard)
	r.client = raft.NewNetworkTransport(client, 1, 5*time.Second, io.Discard)
	t.Cleanup(func() { r.client.Close(); r.server.Close() })
	return r
}

// serve answers each request the server gets with resp, handing the
// request to got.
func (r *rig) serve(t *testing.T, got chan<- any) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			var rpc raft.RPC
			select {
			case rpc = <-r.server.Consumer():
			case <-done:
				return
			}
			var resp any
			switch rpc.Command.(type) {
			case *raft.AppendEntriesRequest:
				resp = &raft.AppendEntriesResponse{Success: true}
			case *raft.RequestVoteRequest:
				resp = &raft.RequestVoteResponse{Granted: true}
			case *raft.RequestPreVoteRequest:
				resp = &raft.RequestPreVoteResponse{Granted: true}
			case *raft.InstallSnapshotRequest:
				data, _ := io.ReadAll(rpc.Reader)
				resp = &raft.InstallSnapshotResponse{Success: string(data) == "snapshot-bytes"}
			case *raft.TimeoutNowRequest:
				resp = &raft.TimeoutNowResponse{}
			}
			got <- rpc.Command
			rpc.Respond(resp, nil)
		}
	}()
}

func header(id string) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte("10.0.0.2:7000")}
}

// TestRPCFrameWireFormat encodes every request type with raft's own
// transport, passes it through the checks and checks that raft's
// receiving transport decodes exactly what was sent (the bytes pass on
// unchanged) and that readFrame read the sender's ID, address and the
// snapshot size. It fails if raft's wire format changes.
func TestRPCFrameWireFormat(t *testing.T) {
	k := &rpcCheck{members: fakeMembers{"n2": "10.0.0.2:7000"}}
	k.raft.Store(&raftRef{
		servers: func() []raft.Server { return []raft.Server{{ID: "n1"}, {ID: "n2"}} },
		leader:  func() string { return "n2" },
	})
	r := newRig(t, k)
	got := make(chan any, 1)
	r.serve(t, got)
	at := time.Unix(1700000000, 123456789).UTC()
	reqs := []any{
		&raft.AppendEntriesRequest{RPCHeader: header("n2"), Term: 7, PrevLogEntry: 3, PrevLogTerm: 6, LeaderCommitIndex: 3,
			Entries: []*raft.Log{
				{Index: 4, Term: 7, Type: raft.LogCommand, Data: bytes.Repeat([]byte("rules"), 20000), Extensions: []byte{1, 2}, AppendedAt: at},
				{Index: 5, Term: 7, Type: raft.LogConfiguration, Data: []byte{9}, AppendedAt: at},
			}},
		&raft.AppendEntriesRequest{RPCHeader: header("n2"), Term: 7}, // a heartbeat
		&raft.RequestVoteRequest{RPCHeader: header("n2"), Term: 8, LastLogIndex: 5, LastLogTerm: 7, LeadershipTransfer: true},
		&raft.RequestPreVoteRequest{RPCHeader: header("n2"), Term: 9, LastLogIndex: 5, LastLogTerm: 7},
		&raft.InstallSnapshotRequest{RPCHeader: header("n2"), SnapshotVersion: 1, Term: 7, LastLogIndex: 5, LastLogTerm: 7,
			Configuration: []byte{1, 2, 3}, ConfigurationIndex: 4, Size: int64(len("snapshot-bytes"))},
		&raft.TimeoutNowRequest{RPCHeader: header("n2")},
	}
	wantType := []byte{rpcAppendEntries, rpcAppendEntries, rpcRequestVote, rpcRequestPreVote, rpcInstallSnapshot, rpcTimeoutNow}
	for i, req := range reqs {
		r.mu.Lock()
		r.wire.Reset()
		r.mu.Unlock()
		var err error
		switch q := req.(type) {
		case *raft.AppendEntriesRequest:
			err = r.client.AppendEntries("n1", "pipe:1", q, &raft.AppendEntriesResponse{})
		case *raft.RequestVoteRequest:
			err = r.client.RequestVote("n1", "pipe:1", q, &raft.RequestVoteResponse{})
		case *raft.RequestPreVoteRequest:
			err = r.client.RequestPreVote("n1", "pipe:1", q, &raft.RequestPreVoteResponse{})
		case *raft.InstallSnapshotRequest:
			var resp raft.InstallSnapshotResponse
			err = r.client.InstallSnapshot("n1", "pipe:1", q, &resp, bytes.NewReader([]byte("snapshot-bytes")))
			if err == nil && !resp.Success {
				t.Errorf("the snapshot's data did not arrive intact")
			}
		case *raft.TimeoutNowRequest:
			err = r.client.TimeoutNow("n1", "pipe:1", q, &raft.TimeoutNowResponse{})
		}
		if err != nil {
			t.Fatalf("%T: %v", req, err)
		}
		if g := <-got; !reflect.DeepEqual(g, req) {
			t.Errorf("%T: raft received\n%+v\nwant\n%+v", req, g, req)
		}
		r.mu.Lock()
		wire := bytes.Clone(r.wire.Bytes())
		r.mu.Unlock()
		f, err := readFrame(bufio.NewReader(bytes.NewReader(wire)), nil)
		if err != nil {
			t.Fatalf("%T: readFrame: %v", req, err)
		}
		if f.Type != wantType[i] || f.ID != "n2" || f.Addr != "10.0.0.2:7000" {
			t.Errorf("%T: read type %d id %q addr %q, want %d n2 10.0.0.2:7000", req, f.Type, f.ID, f.Addr, wantType[i])
		}
		if is, ok := req.(*raft.InstallSnapshotRequest); ok && (f.Size != is.Size || len(wire) != len(f.Raw)+int(is.Size)) {
			t.Errorf("InstallSnapshot: size %d, frame %d of %d bytes; want size %d", f.Size, len(f.Raw), len(wire), is.Size)
		}
	}
	if r.refused != 0 {
		t.Errorf("%d requests refused, want none", r.refused)
	}
}

// TestRPCCheckRefuses: a request naming another sender than its
// connection proved, one from a non-member, or from a wrong address, and
// AppendEntries, InstallSnapshot and TimeoutNow from outside the
// configuration (TimeoutNow: not the leader) never reach Raft.
func TestRPCCheckRefuses(t *testing.T) {
	members := fakeMembers{"n2": "10.0.0.2:7000", "n3": "10.0.0.3:7000"}
	for name, tc := range map[string]struct {
		servers []raft.Server
		leader  string
		send    func(tr *raft.NetworkTransport) error
	}{
		"vote as another node": {send: func(tr *raft.NetworkTransport) error {
			return tr.RequestVote("n1", "pipe:1", &raft.RequestVoteRequest{RPCHeader: header("n3"), Term: 99}, &raft.RequestVoteResponse{})
		}},
		"vote without an id": {send: func(tr *raft.NetworkTransport) error {
			return tr.RequestVote("n1", "pipe:1", &raft.RequestVoteRequest{Term: 99}, &raft.RequestVoteResponse{})
		}},
		"pre-vote from a wrong address": {send: func(tr *raft.NetworkTransport) error {
			h := header("n2")
			h.Addr = []byte("10.9.9.9:7000")
			return tr.RequestPreVote("n1", "pipe:1", &raft.RequestPreVoteRequest{RPCHeader: h, Term: 99}, &raft.RequestPreVoteResponse{})
		}},
		"append entries from outside the configuration": {servers: []raft.Server{{ID: "n1"}, {ID: "n3"}}, leader: "n3", send: func(tr *raft.NetworkTransport) error {
			return tr.AppendEntries("n1", "pipe:1", &raft.AppendEntriesRequest{RPCHeader: header("n2"), Term: 99}, &raft.AppendEntriesResponse{})
		}},
		"install snapshot from outside the configuration": {servers: []raft.Server{{ID: "n1"}}, leader: "n1", send: func(tr *raft.NetworkTransport) error {
			return tr.InstallSnapshot("n1", "pipe:1", &raft.InstallSnapshotRequest{RPCHeader: header("n2"), Term: 99, Size: 1}, &raft.InstallSnapshotResponse{}, bytes.NewReader([]byte{1}))
		}},
		"timeout now from a follower": {servers: []raft.Server{{ID: "n1"}, {ID: "n2"}, {ID: "n3"}}, leader: "n3", send: func(tr *raft.NetworkTransport) error {
			return tr.TimeoutNow("n1", "pipe:1", &raft.TimeoutNowRequest{RPCHeader: header("n2")}, &raft.TimeoutNowResponse{})
		}},
	} {
		t.Run(name, func(t *testing.T) {
			k := &rpcCheck{members: members}
			k.raft.Store(&raftRef{servers: func() []raft.Server { return tc.servers }, leader: func() string { return tc.leader }})
			r := newRig(t, k)
			got := make(chan any, 1)
			r.serve(t, got)
			if err := tc.send(r.client); err == nil {
				t.Error("the request was answered")
			}
			select {
			case g := <-got:
				t.Errorf("raft received %+v", g)
			default:
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.refused != 1 {
				t.Errorf("%d refusals counted, want 1", r.refused)
			}
		})
	}
	// A member that knows no leader takes a member's appends from outside
	// its configuration (it may have missed the change adding it), not a
	// TimeoutNow.
	k := &rpcCheck{members: members}
	k.raft.Store(&raftRef{servers: func() []raft.Server { return []raft.Server{{ID: "n1"}} }, leader: func() string { return "" }})
	if err := k.check("n2", rpcFrame{Type: rpcAppendEntries, ID: "n2", Addr: "10.0.0.2:7000"}); err != nil {
		t.Errorf("append entries from a member, no leader known: %v", err)
	}
	if err := k.check("n2", rpcFrame{Type: rpcTimeoutNow, ID: "n2", Addr: "10.0.0.2:7000"}); !errors.Is(err, ErrRefused) {
		t.Errorf("timeout now, no leader known: %v, want ErrRefused", err)
	}
	// Without a member list entry for its identity, nothing passes.
	k = &rpcCheck{members: fakeMembers{}}
	if err := k.check("n2", rpcFrame{Type: rpcRequestVote, ID: "n2", Addr: "10.0.0.2:7000"}); !errors.Is(err, ErrRefused) {
		t.Errorf("vote from a non-member: %v, want ErrRefused", err)
	}
	if err := k.check("n2", rpcFrame{Type: rpcAppendEntries, ID: "n2"}); !errors.Is(err, ErrRefused) {
		t.Errorf("append entries from a non-member: %v, want ErrRefused", err)
	}
}

type runtimeMem struct{ total uint64 }

func (m *runtimeMem) read() {
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	m.total = s.TotalAlloc
}

// TestReadFrameBounded: hostile lengths fail without allocating them, and
// cut or malformed requests fail cleanly.
func TestReadFrameBounded(t *testing.T) {
	for name, b := range map[string][]byte{
		"4 GiB ID":          {rpcRequestVote, 0x81, 0xa2, 'I', 'D', 0xc6, 0xff, 0xff, 0xff, 0xff},
		"4 G entries":       {rpcAppendEntries, 0x81, 0xa7, 'E', 'n', 't', 'r', 'i', 'e', 's', 0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0},
		"4 G map keys":      {rpcRequestVote, 0xdf, 0xff, 0xff, 0xff, 0xff},
		"deep nesting":      append([]byte{rpcRequestVote, 0x81, 0xa1, 'X'}, bytes.Repeat([]byte{0x91}, 100)...),
		"not a map":         {rpcRequestVote, 0x93, 1, 2, 3},
		"unknown type":      {9, 0x80},
		"cut short":         {rpcRequestVote, 0x82, 0xa2, 'I', 'D'},
		"negative size":     {rpcInstallSnapshot, 0x81, 0xa4, 'S', 'i', 'z', 'e', 0xff},
		"unknown msgpack":   {rpcRequestVote, 0x81, 0xa1, 'X', 0xc1},
		"oversized snippet": {rpcRequestVote, 0x81, 0xa1, 'X', 0xc5, 0xff, 0xff},
	} {
		var before, after runtimeMem
		before.read()
		_, err := readFrame(bufio.NewReader(bytes.NewReader(b)), nil)
		after.read()
		if !errors.Is(err, errFrame) {
			t.Errorf("%s: %v, want errFrame", name, err)
		}
		if grew := after.total - before.total; grew > 1<<20 {
			t.Errorf("%s: allocated %d bytes", name, grew)
		}
	}
}

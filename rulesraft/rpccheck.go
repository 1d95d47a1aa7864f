package rulesraft

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Members tells the inbound RPC checks who is a member (Config.Members).
type Members interface {
	// RaftAddr is the Raft address gossip gives id, with ok true only
	// while id is an admitted member of this node's gossip view. It must
	// not block.
	RaftAddr(id string) (addr string, ok bool)
}

// ErrRefused reports a Raft request the checks refused; the connection
// that carried it is closed.
var ErrRefused = errors.New("rules store: raft request refused")

// rpcCheck checks each inbound Raft request before Raft reads it. Raft's
// NetworkTransport decodes requests itself and never shows the connection,
// so checkConn sits under it: it reads each request's bytes (readFrame),
// checks them here and passes them on unchanged. The rules:
//
//   - every request names its sender (RPCHeader.ID), and, when the
//     connection proved an identity (a node certificate or the hello), the
//     same one; with Members, that sender is an admitted member and its
//     header address is the Raft address gossip gives it;
//   - AppendEntries, InstallSnapshot and TimeoutNow come from a server of
//     the latest configuration (any, before this member has one: it is
//     joining; and, for the first two, any member while this node knows
//     no leader: it may have missed the change that added it), and
//     TimeoutNow from the current leader only.
//
// RequestVote and RequestPreVote from a member outside the configuration
// pass: Raft itself ignores a vote request from a non-voter.
type rpcCheck struct {
	members Members
	raft    atomic.Pointer[raftRef] // set once Raft runs
	log     *slog.Logger
	refused func() // Config.RefusedRPC
	logged  atomic.Int64
}

// check reports why f may not pass (nil: it may). connID is the identity
// the connection proved ("" for none).
func (k *rpcCheck) check(connID string, f rpcFrame) error {
	if f.ID == "" {
		return fmt.Errorf("%w: %s names no sender", ErrRefused, rpcName(f.Type))
	}
	if connID != "" {
		if f.ID != connID {
			return fmt.Errorf("%w: %s names sender %q, its connection proved %q", ErrRefused, rpcName(f.Type), f.ID, connID)
		}
		if k.members != nil {
			addr, ok := k.members.RaftAddr(f.ID)
			if !ok {
				return fmt.Errorf("%w: %s from %q, not an admitted member", ErrRefused, rpcName(f.Type), f.ID)
			}
			if addr != "" && f.Addr != addr {
				return fmt.Errorf("%w: %s from %q gives address %q, gossip gives %q", ErrRefused, rpcName(f.Type), f.ID, f.Addr, addr)
			}
		}
	}
	switch f.Type {
	case rpcAppendEntries, rpcInstallSnapshot, rpcTimeoutNow:
		var (
			servers []raft.Server
			leader  string
		)
		if r := k.raft.Load(); r != nil {
			servers, leader = r.servers(), r.leader()
		}
		// A member that missed the change adding the sender (it was down)
		// knows no leader: it takes a member's requests then (checked
		// above when the connection proved who it is), or it could never
		// catch up.
		missed := leader == "" && f.Type != rpcTimeoutNow
		if len(servers) > 0 && !inConfiguration(servers, f.ID) && !missed {
			return fmt.Errorf("%w: %s from %q, not in the Raft configuration", ErrRefused, rpcName(f.Type), f.ID)
		}
		if f.Type == rpcTimeoutNow && leader != f.ID {
			return fmt.Errorf("%w: TimeoutNow from %q, not the leader (%q)", ErrRefused, f.ID, leader)
		}
	}
	return nil
}

// raftRef is what the checks read of Raft: the latest configuration and
// the current leader, without waiting on Raft's loop.
type raftRef struct {
	servers func() []raft.Server
	leader  func() string
}

func refOf(r *raft.Raft) *raftRef {
	return &raftRef{
		servers: func() []raft.Server { return r.GetConfiguration().Configuration().Servers }, // a copy Raft keeps: no wait
		leader: func() string {
			_, id := r.LeaderWithID()
			return string(id)
		},
	}
}

func inConfiguration(servers []raft.Server, id string) bool {
	for _, s := range servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

// refuse counts and logs (at most every 10 s) a refused request.
func (k *rpcCheck) refuse(c net.Conn, err error) {
	if k.refused != nil {
		k.refused()
	}
	now := time.Now().UnixNano()
	if last := k.logged.Load(); now-last > int64(10*time.Second) && k.logged.CompareAndSwap(last, now) {
		k.log.Warn("raft request refused; connection closed", "from", c.RemoteAddr().String(), "err", err)
	}
}

// wrap puts c under the checks; id tells the identity c proved (called
// before each request, as the hello is read with the first).
func (k *rpcCheck) wrap(c net.Conn, id func() string) net.Conn {
	return &checkConn{Conn: c, id: id, k: k, r: bufio.NewReaderSize(c, 64<<10)}
}

// checkConn is an accepted connection whose requests Raft reads only once
// they passed rpcCheck. One goroutine (Raft's handler of the connection)
// reads it.
type checkConn struct {
	net.Conn
	id  func() string
	k   *rpcCheck
	r   *bufio.Reader
	buf []byte // the frame buffer, reused
	out []byte // checked bytes Raft has not read yet
	raw int64  // snapshot bytes that follow a checked InstallSnapshot
	err error
}

// keepBuf is the largest frame buffer kept between requests.
const keepBuf = 1 << 20

func (c *checkConn) Read(p []byte) (int, error) {
	if len(c.out) == 0 && c.raw == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if cap(c.buf) > keepBuf {
			c.buf = nil
		}
		f, err := readFrame(c.r, c.buf)
		if err == nil {
			err = c.k.check(c.id(), f)
		}
		if err != nil {
			c.err = err
			if errors.Is(err, ErrRefused) || errors.Is(err, errFrame) {
				c.k.refuse(c.Conn, err)
			}
			_ = c.Conn.Close()
			return 0, err
		}
		c.buf, c.out = f.Raw, f.Raw
		if f.Type == rpcInstallSnapshot {
			c.raw = f.Size
		}
	}
	if len(c.out) > 0 {
		n := copy(p, c.out)
		c.out = c.out[n:]
		return n, nil
	}
	if int64(len(p)) > c.raw {
		p = p[:c.raw]
	}
	n, err := c.r.Read(p)
	c.raw -= int64(n)
	return n, err
}

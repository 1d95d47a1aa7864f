package peer_test

import (
	"context"
	"testing"

	"github.com/weirlimit/weir/internal/testcluster"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// A replication stream is answered only where the sender asks
// (ReplicateRequest.ack), cumulatively, so the owner is not woken per
// batch; a sender that predates seq (seq 0) gets an answer per request.
func TestReplicateStreamAnswersOnlyAsks(t *testing.T) {
	c := testcluster.New(t, 2)
	replica, owner := c.Nodes[0], c.Nodes[1]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := testcluster.PeerClient(t, replica.GRPCAddr()).ReplicateStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(seq uint64, ack bool) {
		t.Helper()
		req := &weirv1.ReplicateRequest{From: owner.ID(), Seq: seq, Ack: ack,
			States: []*weirv1.CounterState{{Id: 7, Partition: 1, A: int64(seq)}}}
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	recv := func(want uint64) {
		t.Helper()
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetAcked() != want {
			t.Fatalf("answer acknowledges %d, want %d", resp.GetAcked(), want)
		}
	}
	send(1, false)
	send(2, false)
	send(3, true)
	recv(3) // one answer for the three
	send(0, false)
	recv(0) // an older sender's request: answered although it did not ask
	send(4, false)
	send(5, true)
	recv(5) // nothing was answered for 4
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
}

// Package forward sends the items of a check that other nodes own to
// their owners, and keeps the node's peer connections.
//
// A Table holds one forwarder per destination. Start queues a check's
// items for a destination and Call.Wait returns their results: callers
// bound for the same member are coalesced into few requests on one
// pipelined Peer.ForwardStream, written by whichever caller finds no write
// in progress (no sender goroutine, no timer at low load). Each request
// has its own deadline (Config.Timeout); a stream that answers nothing for
// that long is torn down; a peer that lacks the stream gets unary Forward
// RPCs for a while. Prune drops the forwarders of members that left.
//
// The Table receives what it needs at construction (Config): member ids
// resolve to addresses through Members, dial options carry the
// credentials, metrics go to a registerer, spans to a tracer. It is a wire
// edge: callers speak limit.Item and limit.Result; only the writer
// converts a batch to protobuf.
//
// Goroutines and locks: the forwarder map is replaced, never changed
// (Table.mu serializes changes), so Start finds a forwarder with an atomic
// load; each forwarder has its own mutex, never held while calling out;
// one receiver goroutine per open stream and one per unary RPC, started
// and joined by the Table (Close). The connection pool's map is replaced
// the same way, its mutex serializing dials.
package forward

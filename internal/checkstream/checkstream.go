// Package checkstream keeps long-lived bidirectional streams with one
// request in flight: what a gateway's sender (Limiter.CheckStream) and a
// node's forward sender (Peer.ForwardStream) use instead of a unary RPC
// per batch, which costs far more per batch in grpc-go. Pipe is the client
// side of any such stream, Stream its check form, and Each the server loop
// (also of Peer.ReplicateStream, whose sender pipelines: see
// replication.Streams).
package checkstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// Opener opens a stream bound to ctx: a generated client's method value,
// such as LimiterClient.CheckStream or PeerClient.ForwardStream.
type Opener func(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse], error)

// Pipe is one sender's long-lived stream of Req and Resp messages with one
// request in flight; only that sender may use it. The stream is opened
// lazily and dropped after any failure (the next RoundTrip opens a new
// one): a timeout cancels it, as it would cancel a unary RPC, so a late
// answer can never be taken for a later request's.
type Pipe[Req, Resp any] struct {
	// Name prefixes errors ("client: 127.0.0.1:9090", "peer n2").
	Name string

	key    any // what the stream was opened for (see RoundTrip)
	stream grpc.BidiStreamingClient[Req, Resp]
	cancel context.CancelFunc // ends stream
	timer  *time.Timer        // cancels stream when a request takes too long
}

// RoundTrip sends req and waits at most timeout for the answer. key names
// what open opens a stream to (e.g. the *grpc.ClientConn): a stream opened
// for another key is dropped first. ctx bounds the stream's life, not the
// request. A timeout wraps context.DeadlineExceeded.
func (p *Pipe[Req, Resp]) RoundTrip(ctx context.Context, key any, open func(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[Req, Resp], error), req *Req, timeout time.Duration) (*Resp, error) {
	if p.stream != nil && p.key != key {
		p.Close()
	}
	reused := p.stream != nil
	err := p.send(ctx, key, open, req, timeout)
	if reused && errors.Is(err, io.EOF) {
		// The stream ended before the request was written (its connection
		// broke while the sender was idle), so the other side never saw
		// it: a unary RPC would have taken a fresh connection; so does a
		// fresh stream.
		p.Close()
		err = p.send(ctx, key, open, req, timeout)
	}
	if p.stream == nil { // could not open one
		return nil, err
	}
	var resp *Resp
	if err == nil || errors.Is(err, io.EOF) { // io.EOF: the status comes from Recv
		resp, err = p.stream.Recv()
	}
	if !p.timer.Stop() { // fired: the stream is canceled
		p.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: no answer within %v: %w", p.Name, timeout, context.DeadlineExceeded)
		}
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	return resp, nil
}

// send writes req, opening the stream if there is none (p.stream stays
// nil if that fails), and arms the timeout.
func (p *Pipe[Req, Resp]) send(ctx context.Context, key any, open func(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[Req, Resp], error), req *Req, timeout time.Duration) error {
	if p.stream == nil {
		sctx, cancel := context.WithCancel(ctx)
		p.key, p.cancel = key, cancel
		p.timer = time.AfterFunc(timeout, cancel)
		st, err := open(sctx)
		if err != nil {
			p.Close()
			return err
		}
		p.stream = st
	} else {
		p.timer.Reset(timeout)
	}
	return p.stream.Send(req)
}

// Close drops the stream (if any); the next RoundTrip opens a new one.
func (p *Pipe[Req, Resp]) Close() {
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.cancel != nil {
		p.cancel()
	}
	p.key, p.stream, p.cancel, p.timer = nil, nil, nil, nil
}

// Stream is a Pipe of check requests: each request carries an id and gets
// one result per item.
type Stream struct {
	Pipe[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse]
	id  uint64 // of the last request sent
	req weirv1.CheckStreamRequest
}

// NewStream returns a check stream whose errors start with name.
func NewStream(name string) *Stream {
	s := &Stream{}
	s.Name = name
	return s
}

// Do sends items as one request and waits at most timeout for its answer:
// one result per item. An error means the request failed as a whole; the
// stream is then dropped unless the other side answered the request with
// an error of its own. key, ctx and timeout are as for RoundTrip.
func (s *Stream) Do(ctx context.Context, key any, open Opener, items []*weirv1.CheckItem, timeout time.Duration) ([]*weirv1.CheckResult, error) {
	s.id++
	s.req.Id, s.req.Items = s.id, items
	resp, err := s.RoundTrip(ctx, key, open, &s.req, timeout)
	s.req.Items = nil
	switch {
	case err != nil:
		return nil, err
	case resp.GetId() != s.id:
		s.Close()
		return nil, fmt.Errorf("%s answered request %d while %d was in flight", s.Name, resp.GetId(), s.id)
	case resp.GetErrorCode() != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED:
		return nil, fmt.Errorf("%s: %v: %s", s.Name, resp.GetErrorCode(), resp.GetError())
	case len(resp.GetResults()) != len(items):
		s.Close()
		return nil, fmt.Errorf("%s answered %d results for %d items", s.Name, len(resp.GetResults()), len(items))
	}
	return resp.GetResults(), nil
}

// Serve answers each request of a server stream with decide's results for
// its items, in order, tagged with the request's id. A request decide
// fails as a whole gets a response with error_code set (INVALID_ARGUMENT
// for a gRPC InvalidArgument status, else UNAVAILABLE) and the status in
// error; the stream goes on. It returns nil when the caller closes its
// side, else the Recv or Send error (the stream's context ended).
//
// Requests are decided in order, not concurrently: senders keep one
// request in flight per stream, so a goroutine per request would only add
// cost.
func Serve(stream grpc.BidiStreamingServer[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse],
	decide func(ctx context.Context, items []*weirv1.CheckItem) ([]*weirv1.CheckResult, error)) error {
	return ServeAside(stream, decide, nil, nil)
}

// Decide decides a request's items: one result per item, or an error for
// the request as a whole.
type Decide func(ctx context.Context, items []*weirv1.CheckItem) ([]*weirv1.CheckResult, error)

// ServeAside is Serve, except that a request for which aside reports true
// (one whose decision may wait) is decided by decideAside on a goroutine
// of its own and answered when done, so it does not hold up the requests
// behind it: answers may then come out of order, and the caller matches
// them by id. It returns once those goroutines are done.
func ServeAside(stream grpc.BidiStreamingServer[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse],
	decide Decide, aside func(items []*weirv1.CheckItem) bool, decideAside Decide) error {
	ctx := stream.Context()
	ls := &lockedSend{BidiStreamingServer: stream}
	var wg sync.WaitGroup
	defer wg.Wait()
	resp := new(weirv1.CheckStreamResponse) // reused: Send has encoded it when it returns
	return Each(ls, func(req *weirv1.CheckStreamRequest) *weirv1.CheckStreamResponse {
		if aside != nil && aside(req.GetItems()) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var r weirv1.CheckStreamResponse
				res, err := decideAside(ctx, req.GetItems())
				Answer(&r, req.GetId(), res, err)
				_ = ls.Send(&r) // a failed Send ends the stream: Recv fails too
			}()
			return nil
		}
		res, err := decide(ctx, req.GetItems())
		Answer(resp, req.GetId(), res, err)
		return resp
	})
}

// lockedSend serializes a server stream's Sends (grpc-go allows one at a
// time).
type lockedSend struct {
	grpc.BidiStreamingServer[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse]
	mu sync.Mutex
}

func (l *lockedSend) Send(r *weirv1.CheckStreamResponse) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.BidiStreamingServer.Send(r)
}

// Answer sets resp to the answer of request id as Serve gives it: res, or
// err as the request's error_code (INVALID_ARGUMENT for a gRPC
// InvalidArgument status, else UNAVAILABLE) and error.
func Answer(resp *weirv1.CheckStreamResponse, id uint64, res []*weirv1.CheckResult, err error) {
	resp.Reset()
	resp.Id = id
	if err != nil {
		st := status.Convert(err)
		resp.ErrorCode = weirv1.ErrorCode_ERROR_CODE_UNAVAILABLE
		if st.Code() == codes.InvalidArgument {
			resp.ErrorCode = weirv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT
		}
		resp.Error = st.Code().String() + ": " + st.Message()
		return
	}
	resp.Results = res
}

// Each answers every request of a server stream with handle's response, in
// order (a nil response sends nothing: the request wants no answer, or
// handle answers it otherwise), until the caller
// closes its side (nil) or the stream fails (the Recv or Send error).
func Each[Req, Resp any](stream grpc.BidiStreamingServer[Req, Resp], handle func(*Req) *Resp) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if resp := handle(req); resp != nil {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

// LegacyRetry is how long a peer that answered Unimplemented to a stream
// gets unary RPCs before the stream is tried again (it may have been
// upgraded meanwhile).
const LegacyRetry = time.Minute

// Legacy remembers that the other side lacks the stream (an older node).
// Safe for concurrent use; the zero value means "try the stream".
type Legacy struct{ until atomic.Int64 } // unix ns

// Active reports whether to send unary RPCs instead of the stream now.
func (l *Legacy) Active() bool { return time.Now().UnixNano() < l.until.Load() }

// Saw notes a stream's error: Unimplemented starts LegacyRetry of unary
// RPCs, and Saw reports true so that the caller resends the request as one.
func (l *Legacy) Saw(err error) bool {
	if status.Code(err) != codes.Unimplemented {
		return false
	}
	l.until.Store(time.Now().Add(LegacyRetry).UnixNano())
	return true
}

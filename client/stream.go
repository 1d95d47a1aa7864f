package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"

	"github.com/weirlimit/weir/proto/weirv1"
)

// checkStream is one sender's CheckStream to a node. Only its sender
// touches it. It keeps one request in flight: the sender sends a batch,
// then waits for that batch's answer, so batches coalesce exactly as they
// did with unary Check RPCs (a batch leaves whenever the sender is free).
//
// The stream is opened lazily and dropped after any failure (the next
// batch opens a new one): a timeout cancels it, as it would cancel a unary
// RPC, so a late answer can never be taken for a later request's.
type checkStream struct {
	lc     weirv1.LimiterClient
	addr   string
	stream grpc.BidiStreamingClient[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse]
	cancel context.CancelFunc // ends stream
	timer  *time.Timer        // cancels stream when a request takes too long
	id     uint64             // of the last request sent
	req    weirv1.CheckStreamRequest
}

// check sends items as one request and waits at most timeout for its
// answer. An error means the request failed as a whole; the stream is then
// dropped unless the node answered the request with an error of its own.
func (s *checkStream) check(ctx context.Context, items []*weirv1.CheckItem, timeout time.Duration) ([]*weirv1.CheckResult, error) {
	if s.stream == nil {
		sctx, cancel := context.WithCancel(ctx)
		s.cancel = cancel
		s.timer = time.AfterFunc(timeout, cancel)
		st, err := s.lc.CheckStream(sctx)
		if err != nil {
			s.close()
			return nil, err
		}
		s.stream = st
	} else {
		s.timer.Reset(timeout)
	}
	s.id++
	s.req.Id, s.req.Items = s.id, items
	err := s.stream.Send(&s.req)
	s.req.Items = nil
	var resp *weirv1.CheckStreamResponse
	if err == nil || errors.Is(err, io.EOF) { // io.EOF: the status comes from Recv
		resp, err = s.stream.Recv()
	}
	if !s.timer.Stop() { // fired: the stream is canceled
		s.close()
		if err != nil {
			return nil, fmt.Errorf("client: %s: no answer within %v: %w", s.addr, timeout, context.DeadlineExceeded)
		}
	}
	switch {
	case err != nil:
		s.close()
		return nil, err
	case resp.GetId() != s.id:
		s.close()
		return nil, fmt.Errorf("client: %s answered request %d while %d was in flight", s.addr, resp.GetId(), s.id)
	case resp.GetErrorCode() != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED:
		return nil, fmt.Errorf("client: %s: %v: %s", s.addr, resp.GetErrorCode(), resp.GetError())
	}
	return resp.GetResults(), nil
}

// close drops the stream (if any); the next check opens a new one.
func (s *checkStream) close() {
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.stream, s.cancel, s.timer = nil, nil, nil
}

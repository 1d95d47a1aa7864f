package api

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/weirlimit/weir/proto/weirv1"
)

// clusterService implements weirv1.ClusterServer.
type clusterService struct {
	weirv1.UnimplementedClusterServer
	s *Server
}

var _ weirv1.ClusterServer = (*clusterService)(nil)

// Members describes the cluster as this node sees it.
func (c *clusterService) Members(ctx context.Context, _ *weirv1.MembersRequest) (*weirv1.MembersResponse, error) {
	m, err := c.s.b.Members(ctx)
	if err != nil {
		return nil, grpcError(err)
	}
	return m, nil
}

// WatchMembers sends the member set now, then again whenever it differs
// from the last one sent (checked every Config.MembersPoll).
func (c *clusterService) WatchMembers(_ *weirv1.MembersRequest, stream grpc.ServerStreamingServer[weirv1.MembersResponse]) error {
	s := c.s
	if !s.track() {
		return status.Error(codes.Unavailable, "node is shutting down")
	}
	defer s.active.Done()
	ctx, cancel := s.bound(stream.Context())
	defer cancel()
	last, err := s.b.Members(ctx)
	if err != nil {
		return grpcError(err)
	}
	if err := stream.Send(last); err != nil {
		return err
	}
	t := time.NewTicker(s.cfg.MembersPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return endOfStream(s, stream.Context())
		case <-t.C:
		}
		m, err := s.b.Members(ctx)
		if err != nil {
			s.cfg.Logger.Debug("watch members: reading members", "err", err)
			continue
		}
		if proto.Equal(m, last) {
			continue
		}
		if err := stream.Send(m); err != nil {
			return err
		}
		last = m
	}
}

package api

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/proto/weirv1"
)

// clusterService implements weirv1.ClusterServer over Backend.Members.
type clusterService struct {
	weirv1.UnimplementedClusterServer
	s *Server
}

var _ weirv1.ClusterServer = (*clusterService)(nil)

// RingLayoutHeader is the gRPC response header of Members and
// WatchMembers naming the ring's layout (ring.Layout's name): the members
// message carries the partition count, vnodes and load but no layout. A
// node that sends none is of a version before layouts: consistent.
const RingLayoutHeader = "weir-ring-layout"

// Members describes the cluster as this node sees it.
func (c *clusterService) Members(ctx context.Context, _ *weirv1.MembersRequest) (*weirv1.MembersResponse, error) {
	m, err := c.s.b.Members(ctx)
	if err != nil {
		return nil, GRPCError(err)
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(RingLayoutHeader, m.RingLayout))
	return membersToProto(m), nil
}

// WatchMembers sends the member set now, then again whenever it differs
// from the last one sent (checked every Config.MembersPoll).
func (c *clusterService) WatchMembers(_ *weirv1.MembersRequest, stream grpc.ServerStreamingServer[weirv1.MembersResponse]) error {
	s := c.s
	if !s.track() {
		return GRPCError(limit.Errorf(limit.ErrUnavailable, "node is shutting down"))
	}
	defer s.active.Done()
	ctx, cancel := s.bound(stream.Context())
	defer cancel()
	last, err := s.b.Members(ctx)
	if err != nil {
		return GRPCError(err)
	}
	if err := stream.SetHeader(metadata.Pairs(RingLayoutHeader, last.RingLayout)); err != nil {
		return err
	}
	if err := stream.Send(membersToProto(last)); err != nil {
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
		if m.equal(last) {
			continue
		}
		if err := stream.Send(membersToProto(m)); err != nil {
			return err
		}
		last = m
	}
}

func membersToProto(m Members) *weirv1.MembersResponse {
	out := &weirv1.MembersResponse{
		RingVersion: m.RingVersion, PartitionCount: m.PartitionCount, ReplicationFactor: m.ReplicationFactor,
		Load: m.Load, Gateways: m.Gateways,
	}
	if len(m.Members) > 0 {
		out.Members = make([]*weirv1.Member, len(m.Members))
	}
	for i, mb := range m.Members {
		out.Members[i] = &weirv1.Member{
			Id: mb.ID, GrpcAddr: mb.GRPCAddr, HttpAddr: mb.HTTPAddr, RaftAddr: mb.RaftAddr, GossipAddr: mb.GossipAddr,
			State: mb.State, PartitionsOwned: mb.PartitionsOwned, ReplicasHeld: mb.ReplicasHeld, RaftRole: mb.RaftRole,
		}
	}
	return out
}

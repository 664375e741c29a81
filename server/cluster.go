package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/membership"
)

// Member is one member of the cluster (package membership).
type Member = membership.Member

// memberPB is m as the Cluster service returns it.
func memberPB(m *Member) *pb.Member {
	return &pb.Member{ID: m.ID, Name: m.Name, PeerURLs: append([]string(nil), m.PeerURLs...),
		ClientURLs: append([]string(nil), m.ClientURLs...), IsLearner: m.IsLearner}
}

// clusterServer serves the Cluster service.
type clusterServer struct {
	pb.UnimplementedClusterServer
	s *Server
}

func (c *clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	if r.Linearizable {
		if err := c.s.linearizableRead(ctx); err != nil {
			return nil, toGRPCError(err)
		}
	}
	// etcd's cluster responses carry no revision.
	return &pb.MemberListResponse{Header: c.header(), Members: c.memberList()}, nil
}

package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// maintenanceServer serves the Maintenance service.
type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

// quotaBytes is the backend quota etcd would apply: --quota-backend-bytes,
// 0 meaning the 2 GiB default.
func (s *Server) quotaBytes() int64 {
	q, enabled := s.cfg.QuotaBytes()
	if !enabled {
		return 0
	}
	return q
}

func (m *maintenanceServer) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	s := m.s
	st := s.node.Status()
	ds := s.db.Stats()
	resp := &pb.StatusResponse{
		Header:           s.header(0),
		Version:          EtcdVersion,
		DbSize:           ds.FileSize,
		DbSizeInUse:      ds.InUseBytes,
		Leader:           st.Leader,
		RaftIndex:        st.Committed,
		RaftTerm:         st.Term,
		RaftAppliedIndex: st.Applied,
		DbSizeQuota:      s.quotaBytes(),
		StorageVersion:   ClusterVersion,
	}
	if m := s.members.get(s.id); m != nil {
		resp.IsLearner = m.IsLearner
	}
	return resp, nil
}

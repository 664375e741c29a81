package server

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-db/strata/auth"
	"github.com/strata-db/strata/lease"
	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/raft"
)

// Server-level errors, each mapped to etcd's exact gRPC error.
var (
	errRequestTooLarge = errors.New("server: request is too large")
	errTimeout         = errors.New("server: request timed out")
	// errTimeoutLeaderFail and errTimeoutConnectionLost are etcd's
	// readings of a proposal timeout (see proposalTimeoutErr).
	errTimeoutLeaderFail     = errors.New("server: request timed out, possibly due to previous leader failure")
	errTimeoutConnectionLost = errors.New("server: request timed out, possibly due to connection lost")
	errStopped               = errors.New("server: server stopped")
	errCanceled              = errors.New("server: request canceled")
	// errLeaderTransferTimeout has etcd's text: etcd maps it to no gRPC
	// error of its own, so clients see it as Unknown with this message.
	errLeaderTransferTimeout = errors.New("etcdserver: request timed out, leader transfer took too long")
	errRemoved               = errors.New("server: the member has been permanently removed from the cluster")
	errNoLeader              = errors.New("server: no leader")
	errNoSpace               = errors.New("server: database space exceeded")
	errCorrupt               = errors.New("server: corrupt cluster")
)

// toGRPCError maps an internal error to the status etcd returns, so
// clients that match errors by message behave as against etcd.
func toGRPCError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, membership.ErrIDRemoved), errors.Is(err, membership.ErrIDNotFound):
		return rpctypes.ErrGRPCMemberNotFound
	case errors.Is(err, membership.ErrIDExists):
		return rpctypes.ErrGRPCMemberExist
	case errors.Is(err, membership.ErrPeerURLExists):
		return rpctypes.ErrGRPCPeerURLExist
	case errors.Is(err, membership.ErrMemberNotLearner):
		return rpctypes.ErrGRPCMemberNotLearner
	case errors.Is(err, membership.ErrTooManyLearners):
		return rpctypes.ErrGRPCTooManyLearners
	case errors.Is(err, mvcc.ErrCompacted):
		return rpctypes.ErrGRPCCompacted
	case errors.Is(err, mvcc.ErrFutureRev):
		return rpctypes.ErrGRPCFutureRev
	case errors.Is(err, mvcc.ErrKeyNotFound):
		return rpctypes.ErrGRPCKeyNotFound
	case errors.Is(err, mvcc.ErrLeaseNotFound):
		return rpctypes.ErrGRPCLeaseNotFound
	case errors.Is(err, lease.ErrLeaseExists):
		return rpctypes.ErrGRPCLeaseExist
	case errors.Is(err, lease.ErrLeaseTTLTooLarge):
		return rpctypes.ErrGRPCLeaseTTLTooLarge
	case errors.Is(err, errRequestTooLarge):
		return rpctypes.ErrGRPCRequestTooLarge
	case errors.Is(err, errNoSpace):
		return rpctypes.ErrGRPCNoSpace
	case errors.Is(err, errCorrupt):
		return rpctypes.ErrGRPCCorrupt
	case errors.Is(err, errTimeout):
		return rpctypes.ErrGRPCTimeout
	case errors.Is(err, errTimeoutLeaderFail):
		return rpctypes.ErrGRPCTimeoutDueToLeaderFail
	case errors.Is(err, errTimeoutConnectionLost):
		return rpctypes.ErrGRPCTimeoutDueToConnectionLost
	case errors.Is(err, errLeaderTransferTimeout):
		return status.Error(codes.Unknown, errLeaderTransferTimeout.Error())
	case errors.Is(err, errCanceled):
		return rpctypes.ErrGRPCCanceled
	case errors.Is(err, errStopped), errors.Is(err, raft.ErrStopped), errors.Is(err, mvcc.ErrBackendClosed):
		return rpctypes.ErrGRPCStopped
	case errors.Is(err, errNoLeader), errors.Is(err, raft.ErrNoLeader), errors.Is(err, raft.ErrProposalDropped):
		return rpctypes.ErrGRPCNoLeader
	}
	if ge := auth.ToGRPCError(err); ge != nil {
		if st, ok := status.FromError(ge); ok && st.Code() != codes.Unknown {
			return ge
		}
	}
	return status.Error(codes.Unknown, err.Error())
}

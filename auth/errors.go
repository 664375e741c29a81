package auth

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors. Each error that etcd maps to an rpctypes gRPC error
// carries that gRPC error's exact message ("etcdserver: ..."), so the text
// a client sees is the same whether the server converts the error with
// ToGRPCError or just prints it. The few that etcd does not map (password
// given to a no-password user, bad --auth-token options, key problems)
// keep etcd's own "auth: ..." text, because etcd sends those to clients
// as codes.Unknown with exactly that message.
var (
	ErrRootUserNotExist     = errors.New("etcdserver: root user does not exist")
	ErrRootRoleNotExist     = errors.New("etcdserver: root user does not have root role")
	ErrUserAlreadyExist     = errors.New("etcdserver: user name already exists")
	ErrUserEmpty            = errors.New("etcdserver: user name is empty")
	ErrUserNotFound         = errors.New("etcdserver: user name not found")
	ErrRoleAlreadyExist     = errors.New("etcdserver: role name already exists")
	ErrRoleNotFound         = errors.New("etcdserver: role name not found")
	ErrRoleEmpty            = errors.New("etcdserver: role name is empty")
	ErrPermissionNotGiven   = errors.New("etcdserver: permission not given")
	ErrAuthFailed           = errors.New("etcdserver: authentication failed, invalid user ID or password")
	ErrPermissionDenied     = errors.New("etcdserver: permission denied")
	ErrRoleNotGranted       = errors.New("etcdserver: role is not granted to the user")
	ErrPermissionNotGranted = errors.New("etcdserver: permission is not granted to the role")
	ErrAuthNotEnabled       = errors.New("etcdserver: authentication is not enabled")
	ErrAuthOldRevision      = errors.New("etcdserver: revision of auth store is old")
	ErrInvalidAuthToken     = errors.New("etcdserver: invalid auth token")
	ErrInvalidAuthMgmt      = errors.New("etcdserver: invalid auth management")

	ErrNoPasswordUser    = errors.New("auth: authentication failed, password was given for no password user")
	ErrInvalidAuthOpts   = errors.New("auth: invalid auth options")
	ErrInvalidAuthMethod = errors.New("auth: invalid auth signature method")
	ErrMissingKey        = errors.New("auth: missing key data")
	ErrKeyMismatch       = errors.New("auth: public and private keys don't match")
	ErrVerifyOnly        = errors.New("auth: token signing attempted with verify-only key")
)

// grpcErrors is the 1:1 table from sentinel to etcd's gRPC status error.
var grpcErrors = map[error]error{
	ErrRootUserNotExist:     rpctypes.ErrGRPCRootUserNotExist,
	ErrRootRoleNotExist:     rpctypes.ErrGRPCRootRoleNotExist,
	ErrUserAlreadyExist:     rpctypes.ErrGRPCUserAlreadyExist,
	ErrUserEmpty:            rpctypes.ErrGRPCUserEmpty,
	ErrUserNotFound:         rpctypes.ErrGRPCUserNotFound,
	ErrRoleAlreadyExist:     rpctypes.ErrGRPCRoleAlreadyExist,
	ErrRoleNotFound:         rpctypes.ErrGRPCRoleNotFound,
	ErrRoleEmpty:            rpctypes.ErrGRPCRoleEmpty,
	ErrPermissionNotGiven:   rpctypes.ErrGRPCPermissionNotGiven,
	ErrAuthFailed:           rpctypes.ErrGRPCAuthFailed,
	ErrPermissionDenied:     rpctypes.ErrGRPCPermissionDenied,
	ErrRoleNotGranted:       rpctypes.ErrGRPCRoleNotGranted,
	ErrPermissionNotGranted: rpctypes.ErrGRPCPermissionNotGranted,
	ErrAuthNotEnabled:       rpctypes.ErrGRPCAuthNotEnabled,
	ErrAuthOldRevision:      rpctypes.ErrGRPCAuthOldRevision,
	ErrInvalidAuthToken:     rpctypes.ErrGRPCInvalidAuthToken,
	ErrInvalidAuthMgmt:      rpctypes.ErrGRPCInvalidAuthMgmt,
}

// ToGRPCError converts an error of this package to the gRPC status error
// etcd returns for it. Errors etcd does not map become codes.Unknown with
// the error's text, as etcd's togRPCError does; context cancellation is
// returned unchanged so gRPC reports Canceled/DeadlineExceeded. nil stays
// nil.
func ToGRPCError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if g, ok := grpcErrors[e]; ok {
			return g
		}
	}
	return status.Error(codes.Unknown, err.Error())
}

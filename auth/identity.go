package auth

import (
	"context"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// TokenFromContext returns the token of an incoming gRPC request: the
// "token" metadata that clientv3 sends, else the JSON gateway's
// "authorization" header (with or without "Bearer ").
func TokenFromContext(ctx context.Context) (string, bool) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", false
	}
	ts, ok := md[rpctypes.TokenFieldNameGRPC]
	if !ok {
		ts, ok = md[rpctypes.TokenFieldNameSwagger]
	}
	if !ok || len(ts) == 0 {
		return "", false
	}
	return strings.TrimPrefix(ts[0], "Bearer "), true
}

// AuthInfoFromToken resolves a token. With auth disabled it returns nil
// and no error (nobody needs to be identified); an unknown, expired or
// forged token is ErrInvalidAuthToken.
func (s *Store) AuthInfoFromToken(ctx context.Context, token string) (*AuthInfo, error) {
	st := s.load()
	if !st.enabled {
		return nil, nil
	}
	ai, ok := s.tokens.info(ctx, token, st.revision)
	if !ok {
		s.log.Warn("invalid auth token", "token-fingerprint", fingerprint(token))
		return nil, ErrInvalidAuthToken
	}
	return ai, nil
}

// AuthInfoFromContext identifies the caller of an incoming gRPC request
// the way etcd does: by its token if it sent one; else, when
// clientCertAuth (--client-cert-auth) is on, by the CommonName of its
// verified client certificate; else nobody (nil, nil). The server treats
// nil as AuthInfo{}, which every check refuses with ErrUserEmpty while
// auth is enabled.
func (s *Store) AuthInfoFromContext(ctx context.Context, clientCertAuth bool) (*AuthInfo, error) {
	if !s.IsAuthEnabled() {
		return nil, nil
	}
	if tok, ok := TokenFromContext(ctx); ok {
		return s.AuthInfoFromToken(ctx, tok)
	}
	if !clientCertAuth {
		return nil, nil
	}
	return s.AuthInfoFromTLS(ctx), nil
}

// AuthInfoFromTLS returns the CommonName of the request's verified client
// certificate as the user, at the current auth revision, or nil. Requests
// relayed by the JSON gateway are refused this way: the gateway dials
// with the server's own client certificate, whose CN must not speak for
// the HTTP caller.
func (s *Store) AuthInfoFromTLS(ctx context.Context) *AuthInfo {
	p, ok := peer.FromContext(ctx)
	if !ok || p == nil || p.AuthInfo == nil {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil
	}
	for _, chain := range ti.State.VerifiedChains {
		if len(chain) == 0 {
			continue
		}
		md, ok := metadata.FromIncomingContext(ctx)
		if !ok || len(md["grpcgateway-accept"]) > 0 {
			return nil
		}
		return s.AuthInfoFromCN(chain[0].Subject.CommonName)
	}
	return nil
}

// AuthInfoFromCN is the identity of a verified certificate's CommonName.
// An empty CN identifies nobody.
func (s *Store) AuthInfoFromCN(cn string) *AuthInfo {
	if cn == "" {
		return nil
	}
	return &AuthInfo{Username: cn, Revision: s.Revision()}
}

// RootAuthInfo is the identity the server uses for its own proposals that
// must pass the checks, such as the leader revoking an expired lease
// (etcd's WithRoot).
func (s *Store) RootAuthInfo() *AuthInfo {
	return &AuthInfo{Username: rootUser, Revision: s.Revision()}
}

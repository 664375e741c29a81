package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// tlsCtx is an incoming gRPC context from a peer whose verified client
// certificate has the given CN, with extra metadata pairs.
func tlsCtx(cn string, md ...string) context.Context {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
	info := credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}}
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: info})
	return metadata.NewIncomingContext(ctx, metadata.Pairs(md...))
}

func TestIdentity(t *testing.T) {
	e := newEnv(t)
	s := e.s
	e.setupRoot()
	e.must(e.userAdd("u", "pw"))

	// Auth disabled: nobody needs identifying, even with a bad token.
	if ai, err := s.AuthInfoFromContext(tlsCtx("u", "token", "bogus"), true); ai != nil || err != nil {
		t.Fatalf("disabled: %v %v", ai, err)
	}
	e.must(e.enable())
	tok, err := e.login("u", "pw")
	e.must(err)

	// Token from the "token" metadata, or the gateway's Authorization.
	for _, md := range [][]string{{"token", tok}, {"authorization", tok}, {"authorization", "Bearer " + tok}} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(md...))
		got, ok := TokenFromContext(ctx)
		if !ok || got != tok {
			t.Fatalf("TokenFromContext(%v) = %q %v", md, got, ok)
		}
		ai, err := s.AuthInfoFromContext(ctx, false)
		if err != nil || ai == nil || ai.Username != "u" {
			t.Fatalf("AuthInfoFromContext(%v) = %v %v", md, ai, err)
		}
	}
	// A bad token is an error even when a certificate is present: the
	// token, when sent, decides.
	_, err = s.AuthInfoFromContext(tlsCtx("root", "token", "bogus.1"), true)
	wantErr(t, err, ErrInvalidAuthToken, "etcdserver: invalid auth token")

	// No token: the CN speaks only with --client-cert-auth.
	ai, err := s.AuthInfoFromContext(tlsCtx("u"), true)
	if err != nil || ai == nil || ai.Username != "u" || ai.Revision != s.Revision() {
		t.Fatalf("CN identity = %v %v", ai, err)
	}
	if ai, err := s.AuthInfoFromContext(tlsCtx("u"), false); ai != nil || err != nil {
		t.Fatalf("CN without client-cert-auth = %v %v", ai, err)
	}
	// The gateway's own certificate never speaks for its HTTP callers.
	if ai, _ := s.AuthInfoFromContext(tlsCtx("root", "grpcgateway-accept", "application/json"), true); ai != nil {
		t.Fatalf("gateway CN accepted: %v", ai)
	}
	if ai := s.AuthInfoFromTLS(context.Background()); ai != nil {
		t.Fatalf("no peer: %v", ai)
	}
	if ai := s.AuthInfoFromCN(""); ai != nil {
		t.Fatal("an empty CN identified someone")
	}
	// No credentials at all: nil, which the checks refuse as no user.
	ai, err = s.AuthInfoFromContext(context.Background(), true)
	if ai != nil || err != nil {
		t.Fatalf("anonymous = %v %v", ai, err)
	}
	wantErr(t, s.IsRangePermitted(ai, []byte("k"), nil), ErrUserEmpty, "etcdserver: user name is empty")
	if err := s.IsAdminPermitted(s.RootAuthInfo()); err != nil {
		t.Fatalf("RootAuthInfo: %v", err)
	}
}

// TestConcurrentChecksDuringApply runs permission checks and token
// lookups while the apply goroutine changes permissions; run with -race.
func TestConcurrentChecksDuringApply(t *testing.T) {
	e := permEnv(t)
	s := e.s
	tok, err := e.login("reader", "pw")
	e.must(err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ai, err := s.AuthInfoFromToken(context.Background(), tok)
				if err != nil {
					t.Error(err)
					return
				}
				err = s.IsRangePermitted(ai, []byte("/r/a"), nil)
				if err != nil && err != ErrPermissionDenied && err != ErrAuthOldRevision {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 50 {
		e.must(e.revokePerm("ro", "/r/", "/r0"))
		e.must(e.grantPerm("ro", authpb.Permission_READ, "/r/", "/r0"))
	}
	close(stop)
	wg.Wait()
}

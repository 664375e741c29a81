package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/server/config"
)

func TestAuthenticateFlowSimpleToken(t *testing.T) {
	e := newEnv(t)
	s := e.s
	ctx := context.Background()
	e.setupRoot()
	e.must(e.userAdd("u", "pw"))
	e.must(e.apply(func(w Writer) error {
		_, err := s.UserAdd(w, &pb.AuthUserAddRequest{Name: "nopw", Options: &authpb.UserAddOptions{NoPassword: true}})
		return err
	}))

	_, err := s.CheckPassword("u", "pw")
	wantErr(t, err, ErrAuthNotEnabled, "etcdserver: authentication is not enabled")
	err = e.apply(func(Writer) error {
		_, err := s.Authenticate(&pb.InternalAuthenticateRequest{Name: "u", SimpleToken: "x"}, e.index)
		return err
	})
	wantErr(t, err, ErrAuthNotEnabled, "etcdserver: authentication is not enabled")
	if ai, err := s.AuthInfoFromToken(ctx, "anything"); ai != nil || err != nil {
		t.Fatalf("auth disabled: AuthInfoFromToken = %v, %v", ai, err)
	}

	e.must(e.enable())
	_, err = e.login("u", "wrong")
	wantErr(t, err, ErrAuthFailed, "etcdserver: authentication failed, invalid user ID or password")
	_, err = e.login("nobody", "pw")
	wantErr(t, err, ErrAuthFailed, "etcdserver: authentication failed, invalid user ID or password")
	_, err = e.login("nopw", "")
	wantErr(t, err, ErrNoPasswordUser, "auth: authentication failed, password was given for no password user")
	// Authenticate at apply refuses a no-password user too.
	err = e.apply(func(Writer) error {
		_, err := s.Authenticate(&pb.InternalAuthenticateRequest{Name: "nopw", SimpleToken: "x"}, e.index)
		return err
	})
	wantErr(t, err, ErrAuthFailed, "etcdserver: authentication failed, invalid user ID or password")

	tok, err := e.login("u", "pw")
	e.must(err)
	prefix, idx, ok := strings.Cut(tok, ".")
	if !ok || len(prefix) != 16 || idx == "" {
		t.Fatalf("token %q is not <16 letters>.<index>", tok)
	}
	ai, err := s.AuthInfoFromToken(ctx, tok)
	e.must(err)
	if ai.Username != "u" || ai.Revision != s.Revision() {
		t.Fatalf("AuthInfo = %+v (store revision %d)", ai, s.Revision())
	}
	for _, bad := range []string{"", "garbage", "abc.def", tok + "1", "x." + idx} {
		_, err := s.AuthInfoFromToken(ctx, bad)
		wantErr(t, err, ErrInvalidAuthToken, "etcdserver: invalid auth token")
	}

	// TTL (10 s in the env): each use refreshes it...
	for range 3 {
		e.clock.advance(8 * time.Second)
		if _, err := s.AuthInfoFromToken(ctx, tok); err != nil {
			t.Fatalf("token expired while in use: %v", err)
		}
	}
	// ...and an idle token dies.
	e.clock.advance(11 * time.Second)
	_, err = s.AuthInfoFromToken(ctx, tok)
	wantErr(t, err, ErrInvalidAuthToken, "etcdserver: invalid auth token")

	// Password change and user deletion invalidate the user's tokens;
	// other users' tokens survive.
	tok, _ = e.login("u", "pw")
	rootTok, err := e.login("root", "rootpw")
	e.must(err)
	cp := &pb.AuthUserChangePasswordRequest{Name: "u", Password: "pw2"}
	e.must(s.PrepareUserChangePassword(cp))
	e.must(e.apply(func(w Writer) error { _, err := s.UserChangePassword(w, cp); return err }))
	_, err = s.AuthInfoFromToken(ctx, tok)
	wantErr(t, err, ErrInvalidAuthToken, "etcdserver: invalid auth token")
	tok, err = e.login("u", "pw2")
	e.must(err)
	e.must(e.apply(func(w Writer) error { _, err := s.UserDelete(w, &pb.AuthUserDeleteRequest{Name: "u"}); return err }))
	_, err = s.AuthInfoFromToken(ctx, tok)
	wantErr(t, err, ErrInvalidAuthToken, "etcdserver: invalid auth token")
	if _, err := s.AuthInfoFromToken(ctx, rootTok); err != nil {
		t.Fatalf("root's token died with u's: %v", err)
	}

	// Disable drops every token; after re-enable they stay dead.
	e.must(e.disable())
	e.must(e.enable())
	_, err = s.AuthInfoFromToken(ctx, rootTok)
	wantErr(t, err, ErrInvalidAuthToken, "etcdserver: invalid auth token")
}

func TestSimpleTokenIndexWaiter(t *testing.T) {
	applied := make(chan struct{})
	tp := NewSimpleTokenProvider(SimpleTokenOptions{IndexWaiter: func(i uint64) <-chan struct{} {
		if i <= 5 {
			c := make(chan struct{})
			close(c)
			return c
		}
		return applied // never closed: index 6 is not applied here
	}})
	tp.enable()
	tok5, err := tp.assign("u", 1, "abcdefghijklmnop", 5)
	if err != nil {
		t.Fatal(err)
	}
	tok6, _ := tp.assign("u", 1, "abcdefghijklmnop", 6)
	if ai, ok := tp.info(context.Background(), tok5, 7); !ok || ai.Username != "u" || ai.Revision != 7 {
		t.Fatalf("info(tok5) = %v, %v", ai, ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, ok := tp.info(ctx, tok6, 7); ok {
		t.Fatal("a token from an unapplied index resolved")
	}
}

// writePEM writes a PEM block to a file in dir and returns its path.
func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestJWTTokens(t *testing.T) {
	dir := t.TempDir()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaPrivDER, _ := x509.MarshalPKCS8PrivateKey(rsaKey)
	rsaPubDER, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	rsaPriv := writePEM(t, dir, "rsa.key", "PRIVATE KEY", rsaPrivDER)
	rsaPub := writePEM(t, dir, "rsa.pub", "PUBLIC KEY", rsaPubDER)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecPrivDER, _ := x509.MarshalECPrivateKey(ecKey)
	ecPriv := writePEM(t, dir, "ec.key", "EC PRIVATE KEY", ecPrivDER)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	edPrivDER, _ := x509.MarshalPKCS8PrivateKey(edKey)
	edPriv := writePEM(t, dir, "ed.key", "PRIVATE KEY", edPrivDER)
	hmacSecret := filepath.Join(dir, "hmac.key")
	if err := os.WriteFile(hmacSecret, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}

	specs := map[string]string{
		"RS256": "jwt,pub-key=" + rsaPub + ",priv-key=" + rsaPriv + ",sign-method=RS256,ttl=1m",
		"PS384": "jwt,priv-key=" + rsaPriv + ",sign-method=PS384",
		"ES256": "jwt,priv-key=" + ecPriv + ",sign-method=ES256,ttl=1m",
		"HS256": "jwt,priv-key=" + hmacSecret + ",sign-method=HS256,ttl=1m",
		"EdDSA": "jwt,priv-key=" + edPriv + ",sign-method=EdDSA,ttl=1m",
	}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			o, err := ParseTokenOptions(spec)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "db")
			e := openEnv(t, path, func(c *fakeClock) TokenProvider {
				tp, err := NewTokenProvider(o, SimpleTokenOptions{}, nil)
				if err != nil {
					t.Fatal(err)
				}
				tp.(*jwtTokens).now = c.now
				return tp
			})
			s := e.s
			ctx := context.Background()
			e.setupRoot()
			e.must(e.userAdd("u", "pw"))
			e.must(e.enable())
			if p, _ := s.GenTokenPrefix(); p != "" {
				t.Fatalf("JWT token prefix = %q, want empty", p)
			}
			tok, err := e.login("u", "pw")
			e.must(err)
			if strings.Count(tok, ".") != 2 {
				t.Fatalf("not a JWT: %q", tok)
			}
			ai, err := s.AuthInfoFromToken(ctx, tok)
			e.must(err)
			if ai.Username != "u" || ai.Revision != s.Revision() {
				t.Fatalf("AuthInfo = %+v, revision %d", ai, s.Revision())
			}
			// Tampering with the payload breaks the signature.
			parts := strings.Split(tok, ".")
			forged := parts[0] + "." + parts[1] + "x." + parts[2]
			_, err = s.AuthInfoFromToken(ctx, forged)
			wantErr(t, err, ErrInvalidAuthToken, "etcdserver: invalid auth token")
			// An unsigned token is refused.
			none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"username": "root", "revision": 99, "exp": e.clock.now().Add(time.Hour).Unix()}).
				SignedString(jwt.UnsafeAllowNoneSignatureType)
			_, err = s.AuthInfoFromToken(ctx, none)
			wantErr(t, err, ErrInvalidAuthToken, "etcdserver: invalid auth token")

			// After an auth change the token's revision is old.
			e.must(e.roleAdd("r"))
			ai, err = s.AuthInfoFromToken(ctx, tok)
			e.must(err)
			wantErr(t, s.IsRangePermitted(ai, []byte("k"), nil), ErrAuthOldRevision, "etcdserver: revision of auth store is old")

			// Expiry.
			ttl := 5 * time.Minute
			if o.TTL != 0 {
				ttl = o.TTL
			}
			e.clock.advance(ttl + time.Second)
			_, err = s.AuthInfoFromToken(ctx, tok)
			wantErr(t, err, ErrInvalidAuthToken, "etcdserver: invalid auth token")
		})
	}
}

func TestJWTKeyErrors(t *testing.T) {
	k1, _ := rsa.GenerateKey(rand.Reader, 1024)
	k2, _ := rsa.GenerateKey(rand.Reader, 1024)
	d1, _ := x509.MarshalPKCS8PrivateKey(k1)
	p2, _ := x509.MarshalPKIXPublicKey(&k2.PublicKey)
	p1, _ := x509.MarshalPKIXPublicKey(&k1.PublicKey)
	priv1 := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: d1})
	pub1 := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: p1})
	pub2 := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: p2})

	if _, err := NewJWTTokenProvider(JWTOptions{SignMethod: "RS256", PrivateKey: priv1, PublicKey: pub2}); err != ErrKeyMismatch {
		t.Errorf("mismatched keys: %v", err)
	}
	if _, err := NewJWTTokenProvider(JWTOptions{SignMethod: "RS256"}); err != ErrMissingKey {
		t.Errorf("no keys: %v", err)
	}
	if _, err := NewJWTTokenProvider(JWTOptions{SignMethod: "XX999", PrivateKey: priv1}); err != ErrInvalidAuthMethod {
		t.Errorf("bad method: %v", err)
	}
	if _, err := NewJWTTokenProvider(JWTOptions{SignMethod: "none", PrivateKey: priv1}); err != ErrInvalidAuthMethod {
		t.Errorf("none method: %v", err)
	}
	// A verify-only member resolves tokens signed by a member with the
	// private key, but cannot issue any.
	signer, err := NewJWTTokenProvider(JWTOptions{SignMethod: "RS256", PrivateKey: priv1})
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := NewJWTTokenProvider(JWTOptions{SignMethod: "RS256", PublicKey: pub1})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := signer.assign("u", 3, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if ai, ok := verifier.info(context.Background(), tok, 0); !ok || ai.Username != "u" || ai.Revision != 3 {
		t.Fatalf("verifier.info = %v %v", ai, ok)
	}
	if _, err := verifier.assign("u", 3, "", 0); err != ErrVerifyOnly {
		t.Errorf("verify-only assign: %v", err)
	}
	// A token signed with another algorithm (same key bytes as an HMAC
	// secret: the classic confusion attack) is refused.
	hs, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"username": "root", "revision": 1, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(pub1)
	if _, ok := verifier.info(context.Background(), hs, 0); ok {
		t.Fatal("HS256 token signed with the RSA public key was accepted")
	}
}

func TestParseTokenOptions(t *testing.T) {
	o, err := ParseTokenOptions("jwt,pub-key=a.pem,priv-key=b.pem,sign-method=ES384,ttl=10m,foo=bar")
	if err != nil {
		t.Fatal(err)
	}
	want := TokenOptions{Type: "jwt", SignMethod: "ES384", PubKeyFile: "a.pem", PrivKeyFile: "b.pem", TTL: 10 * time.Minute, Unknown: map[string]string{"foo": "bar"}}
	if o.Type != want.Type || o.SignMethod != want.SignMethod || o.PubKeyFile != want.PubKeyFile || o.PrivKeyFile != want.PrivKeyFile || o.TTL != want.TTL || o.Unknown["foo"] != "bar" {
		t.Fatalf("got %+v", o)
	}
	for _, bad := range []string{"jwt,ttl", "jwt,ttl=1m,ttl=2m", "jwt,a=b=c", "oauth", "jwt,ttl=soon"} {
		if _, err := ParseTokenOptions(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, ok := range []string{"simple", ""} {
		if _, err := ParseTokenOptions(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	tp, err := NewTokenProvider(TokenOptions{}, SimpleTokenOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.assign("u", 1, "p", 1); err != ErrAuthFailed {
		t.Errorf("--auth-token '' must refuse to issue tokens: %v", err)
	}
}

// TestTokenOptionsMatchConfig keeps TokenOptions convertible from the
// config package's parsed --auth-token, and the two parsers in agreement.
func TestTokenOptionsMatchConfig(t *testing.T) {
	const spec = "jwt,pub-key=a.pem,priv-key=b.pem,sign-method=RS512,ttl=3m"
	c := &config.Config{AuthToken: spec}
	co, err := c.AuthTokenOptions()
	if err != nil {
		t.Fatal(err)
	}
	o, err := ParseTokenOptions(spec)
	if err != nil {
		t.Fatal(err)
	}
	if conv := TokenOptions(co); conv.Type != o.Type || conv.SignMethod != o.SignMethod ||
		conv.PubKeyFile != o.PubKeyFile || conv.PrivKeyFile != o.PrivKeyFile || conv.TTL != o.TTL {
		t.Fatalf("config %+v, auth %+v", conv, o)
	}
}

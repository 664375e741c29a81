package auth

import (
	"context"
	"crypto"
	"fmt"
	"log/slog"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWTOptions configures JWT tokens.
type JWTOptions struct {
	SignMethod string // RS256/384/512, PS256/384/512, ES256/384/512, HS256/384/512, EdDSA
	// PrivateKey is the PEM private key (or, for HS*, the raw secret).
	// Without it the provider only verifies tokens signed elsewhere.
	PrivateKey []byte
	// PublicKey is the PEM public key; with PrivateKey it must match it.
	PublicKey []byte
	TTL       time.Duration // token lifetime; zero means DefaultJWTTTL
	Now       func() time.Time
	Logger    *slog.Logger
}

// jwtTokens are signed, self-contained tokens with the claims etcd uses:
// "username", "revision" (the auth revision at issue) and "exp". Any
// member with the key resolves them without shared state, and since they
// carry their revision, every auth change makes older tokens fail with
// ErrAuthOldRevision, which tells clients to authenticate again.
type jwtTokens struct {
	method     jwt.SigningMethod
	signKey    any // nil when verify-only
	verifyKey  any
	ttl        time.Duration
	now        func() time.Time
	log        *slog.Logger
	verifyOnly bool
}

// NewJWTTokenProvider returns a JWT provider. The key kinds must fit the
// method, and a given public key must match the private key.
func NewJWTTokenProvider(o JWTOptions) (TokenProvider, error) {
	if o.TTL <= 0 {
		o.TTL = DefaultJWTTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	m := jwt.GetSigningMethod(o.SignMethod)
	if m == nil || m == jwt.SigningMethodNone {
		return nil, ErrInvalidAuthMethod
	}
	t := &jwtTokens{method: m, ttl: o.TTL, now: o.Now, log: o.Logger}
	var priv, pub any
	var err error
	switch m.(type) {
	case *jwt.SigningMethodHMAC:
		if len(o.PrivateKey) == 0 {
			return nil, ErrMissingKey
		}
		t.signKey, t.verifyKey = o.PrivateKey, o.PrivateKey
		return t, nil
	case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS:
		priv, pub, err = parsePEMKeys(o, func(b []byte) (any, error) { return jwt.ParseRSAPrivateKeyFromPEM(b) },
			func(b []byte) (any, error) { return jwt.ParseRSAPublicKeyFromPEM(b) })
	case *jwt.SigningMethodECDSA:
		priv, pub, err = parsePEMKeys(o, func(b []byte) (any, error) { return jwt.ParseECPrivateKeyFromPEM(b) },
			func(b []byte) (any, error) { return jwt.ParseECPublicKeyFromPEM(b) })
	case *jwt.SigningMethodEd25519:
		priv, pub, err = parsePEMKeys(o, func(b []byte) (any, error) { return jwt.ParseEdPrivateKeyFromPEM(b) },
			func(b []byte) (any, error) { return jwt.ParseEdPublicKeyFromPEM(b) })
	default:
		return nil, ErrInvalidAuthMethod
	}
	if err != nil {
		return nil, err
	}
	if priv == nil {
		t.verifyKey, t.verifyOnly = pub, true
		return t, nil
	}
	derived := priv.(interface{ Public() crypto.PublicKey }).Public()
	if pub != nil && !pub.(interface{ Equal(crypto.PublicKey) bool }).Equal(derived) {
		return nil, ErrKeyMismatch
	}
	t.signKey, t.verifyKey = priv, derived
	return t, nil
}

func parsePEMKeys(o JWTOptions, privFn, pubFn func([]byte) (any, error)) (priv, pub any, err error) {
	if len(o.PrivateKey) > 0 {
		if priv, err = privFn(o.PrivateKey); err != nil {
			return nil, nil, fmt.Errorf("auth: jwt private key: %w", err)
		}
	}
	if len(o.PublicKey) > 0 {
		if pub, err = pubFn(o.PublicKey); err != nil {
			return nil, nil, fmt.Errorf("auth: jwt public key: %w", err)
		}
	}
	if priv == nil && pub == nil {
		return nil, nil, ErrMissingKey
	}
	return priv, pub, nil
}

func (t *jwtTokens) assign(user string, revision uint64, _ string, _ uint64) (string, error) {
	if t.verifyOnly {
		return "", ErrVerifyOnly
	}
	tk := jwt.NewWithClaims(t.method, jwt.MapClaims{
		"username": user,
		"revision": revision,
		"exp":      t.now().Add(t.ttl).Unix(),
	})
	s, err := tk.SignedString(t.signKey)
	if err != nil {
		return "", fmt.Errorf("auth: sign jwt: %w", err)
	}
	return s, nil
}

func (t *jwtTokens) info(_ context.Context, token string, _ uint64) (*AuthInfo, bool) {
	parsed, err := jwt.Parse(token, func(*jwt.Token) (any, error) { return t.verifyKey, nil },
		// Pin the algorithm: a token may not choose its own (the classic
		// "alg: none" / HMAC-with-the-public-key attacks).
		jwt.WithValidMethods([]string{t.method.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(t.now))
	if err != nil || !parsed.Valid {
		t.log.Warn("failed to parse a JWT token", "error", err)
		return nil, false
	}
	claims, ok := parsed.Claims.(jwt.MapClaims)
	if !ok {
		return nil, false
	}
	user, ok := claims["username"].(string)
	if !ok {
		return nil, false
	}
	rev, ok := claims["revision"].(float64)
	if !ok || rev < 0 {
		return nil, false
	}
	return &AuthInfo{Username: user, Revision: uint64(rev)}, true
}

func (t *jwtTokens) genTokenPrefix() (string, error) { return "", nil }
func (t *jwtTokens) enable()                         {}
func (t *jwtTokens) disable()                        {}
func (t *jwtTokens) invalidateUser(string)           {}

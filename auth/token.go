package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// TokenProvider issues tokens at Authenticate's apply and resolves them on
// every request. Its methods are unexported: the two kinds are built by
// NewTokenProvider (or NewSimpleTokenProvider / NewJWTTokenProvider) and
// handed to New in Config.Tokens.
type TokenProvider interface {
	// info resolves a token to its user. revision is the store's current
	// auth revision, used by tokens that do not carry their own.
	info(ctx context.Context, token string, revision uint64) (*AuthInfo, bool)
	// assign issues a token for username at apply. prefix is the
	// proposer's GenTokenPrefix result and index the entry's raft index.
	assign(username string, revision uint64, prefix string, index uint64) (string, error)
	// genTokenPrefix is called before proposing Authenticate.
	genTokenPrefix() (string, error)
	enable()
	disable()
	invalidateUser(username string)
}

// TokenOptions is --auth-token decomposed. Its fields match
// config.AuthTokenOptions one for one, so the server converts with
// auth.TokenOptions(cfgOpts).
type TokenOptions struct {
	Type        string        // "simple", "jwt", or "" (no tokens: Authenticate fails)
	SignMethod  string        // jwt sign-method: RS256, PS384, ES512, HS256, EdDSA, ...
	PubKeyFile  string        // jwt pub-key: PEM public key (verify)
	PrivKeyFile string        // jwt priv-key: PEM private key, or the HMAC secret
	TTL         time.Duration // jwt ttl; 5m when not given
	Unknown     map[string]string
}

// DefaultJWTTTL is the lifetime of a JWT when ttl= is not given.
const DefaultJWTTTL = 5 * time.Minute

// ParseTokenOptions parses an --auth-token value such as "simple" or
// "jwt,pub-key=a.pem,priv-key=b.pem,sign-method=RS256,ttl=10m", with
// etcd's rules: comma-separated key=value pairs after the type, no
// duplicates, unknown keys kept (and warned about by NewTokenProvider).
func ParseTokenOptions(spec string) (TokenOptions, error) {
	parts := strings.Split(spec, ",")
	o := TokenOptions{Type: parts[0]}
	seen := map[string]bool{}
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok || strings.Contains(v, "=") || seen[k] {
			return o, fmt.Errorf("%w: %q", ErrInvalidAuthOpts, p)
		}
		seen[k] = true
		switch k {
		case "sign-method":
			o.SignMethod = v
		case "pub-key":
			o.PubKeyFile = v
		case "priv-key":
			o.PrivKeyFile = v
		case "ttl":
			d, err := time.ParseDuration(v)
			if err != nil {
				return o, fmt.Errorf("%w: ttl: %w", ErrInvalidAuthOpts, err)
			}
			o.TTL = d
		default:
			if o.Unknown == nil {
				o.Unknown = map[string]string{}
			}
			o.Unknown[k] = v
		}
	}
	switch o.Type {
	case "simple", "", "jwt":
	default:
		return o, fmt.Errorf("%w: unknown token type %q", ErrInvalidAuthOpts, o.Type)
	}
	return o, nil
}

// NewTokenProvider builds the provider --auth-token asks for. simple
// configures simple tokens (its TTL is --auth-token-ttl); JWT key files
// are read here.
func NewTokenProvider(o TokenOptions, simple SimpleTokenOptions, log *slog.Logger) (TokenProvider, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch o.Type {
	case "simple":
		log.Warn("simple token is not cryptographically signed")
		if simple.Logger == nil {
			simple.Logger = log
		}
		return NewSimpleTokenProvider(simple), nil
	case "":
		return nopTokens{}, nil
	case "jwt":
	default:
		return nil, fmt.Errorf("%w: unknown token type %q", ErrInvalidAuthOpts, o.Type)
	}
	if len(o.Unknown) > 0 {
		log.Warn("unknown JWT options", "keys", fmt.Sprint(o.Unknown))
	}
	var priv, pub []byte
	var err error
	if o.PrivKeyFile != "" {
		if priv, err = os.ReadFile(o.PrivKeyFile); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidAuthOpts, err)
		}
	}
	if o.PubKeyFile != "" {
		if pub, err = os.ReadFile(o.PubKeyFile); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidAuthOpts, err)
		}
	}
	ttl := o.TTL
	if ttl == 0 {
		ttl = DefaultJWTTTL
	}
	return NewJWTTokenProvider(JWTOptions{SignMethod: o.SignMethod, PrivateKey: priv, PublicKey: pub, TTL: ttl, Logger: log})
}

// nopTokens is --auth-token "": no token can be issued or resolved.
type nopTokens struct{}

func (nopTokens) info(context.Context, string, uint64) (*AuthInfo, bool) { return nil, false }
func (nopTokens) assign(string, uint64, string, uint64) (string, error) {
	return "", ErrAuthFailed
}
func (nopTokens) genTokenPrefix() (string, error) { return "", nil }
func (nopTokens) enable()                         {}
func (nopTokens) disable()                        {}
func (nopTokens) invalidateUser(string)           {}

// fingerprint identifies a token in logs without revealing it.
func fingerprint(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])[:12]
}

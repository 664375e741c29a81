package auth

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultSimpleTokenTTL is --auth-token-ttl's default.
const DefaultSimpleTokenTTL = 300 * time.Second

// SimpleTokenOptions configures simple tokens.
type SimpleTokenOptions struct {
	// TTL is how long a token lives after its last use (--auth-token-ttl).
	// Zero means DefaultSimpleTokenTTL.
	TTL time.Duration
	// IndexWaiter, when set, returns a channel closed once the local
	// member has applied the raft index. A token names the index that
	// issued it, and a member that has not applied that index yet does
	// not know the token; waiting (bounded by the request's context)
	// avoids rejecting a fresh token on a lagging member, as etcd does.
	IndexWaiter func(index uint64) <-chan struct{}
	// Now is the clock; nil means time.Now. Tests replace it.
	Now    func() time.Time
	Logger *slog.Logger
}

// simpleTokens are random, unsigned tokens "<16 letters>.<raft index>",
// known only to the members that applied the Authenticate entry. A token
// expires TTL after its last use.
//
// Expiry is checked when a token is used, so an expired token is refused
// at once rather than up to a sweep period late; expired tokens nobody
// uses again are swept on later assigns, which bounds the map by the
// tokens issued in one TTL without a background goroutine.
type simpleTokens struct {
	ttl    time.Duration
	waiter func(uint64) <-chan struct{}
	now    func() time.Time
	log    *slog.Logger

	mu        sync.Mutex
	enabled   bool                   // guarded by mu; false drops all tokens
	tokens    map[string]simpleToken // guarded by mu
	lastSweep time.Time              // guarded by mu
}

type simpleToken struct {
	user    string
	expires time.Time
}

// NewSimpleTokenProvider returns the simple token provider.
func NewSimpleTokenProvider(o SimpleTokenOptions) TokenProvider {
	if o.TTL <= 0 {
		o.TTL = DefaultSimpleTokenTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &simpleTokens{ttl: o.TTL, waiter: o.IndexWaiter, now: o.Now, log: o.Logger, tokens: map[string]simpleToken{}}
}

const (
	simpleTokenLetters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	simpleTokenLen     = 16
)

func (t *simpleTokens) genTokenPrefix() (string, error) {
	// rand.Text would do, but etcd's tokens are letters only and some
	// clients log or split them; keep the same alphabet. 256 % 52 != 0,
	// so reject bytes >= 208 to stay uniform.
	out := make([]byte, 0, simpleTokenLen)
	var buf [32]byte
	for len(out) < simpleTokenLen {
		if _, err := rand.Read(buf[:]); err != nil {
			return "", err
		}
		for _, b := range buf {
			if b < 208 && len(out) < simpleTokenLen {
				out = append(out, simpleTokenLetters[int(b)%len(simpleTokenLetters)])
			}
		}
	}
	return string(out), nil
}

func (t *simpleTokens) assign(user string, _ uint64, prefix string, index uint64) (string, error) {
	if prefix == "" {
		return "", errors.New("auth: simple token prefix missing from the Authenticate request")
	}
	tok := prefix + "." + strconv.FormatUint(index, 10)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.enabled {
		// Authenticate checks that auth is enabled first; a token issued
		// while disabled would be dropped by disable anyway.
		return tok, nil
	}
	now := t.now()
	t.tokens[tok] = simpleToken{user: user, expires: now.Add(t.ttl)}
	if now.Sub(t.lastSweep) >= t.ttl {
		for k, v := range t.tokens {
			if now.After(v.expires) {
				delete(t.tokens, k)
			}
		}
		t.lastSweep = now
	}
	return tok, nil
}

func (t *simpleTokens) info(ctx context.Context, token string, revision uint64) (*AuthInfo, bool) {
	prefix, idx, ok := strings.Cut(token, ".")
	if !ok || prefix == "" || strings.Contains(idx, ".") {
		return nil, false
	}
	index, err := strconv.ParseUint(idx, 10, 64)
	if err != nil {
		return nil, false
	}
	if t.waiter != nil {
		select {
		case <-t.waiter(index):
		case <-ctx.Done():
			return nil, false
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.tokens[token]
	if !ok {
		return nil, false
	}
	now := t.now()
	if now.After(st.expires) {
		delete(t.tokens, token)
		return nil, false
	}
	// Each use extends the token's life by a full TTL.
	st.expires = now.Add(t.ttl)
	t.tokens[token] = st
	// A simple token always speaks for the current auth revision: it is
	// resolved against the live store, never against a stale copy.
	return &AuthInfo{Username: st.user, Revision: revision}, true
}

func (t *simpleTokens) enable() {
	t.mu.Lock()
	t.enabled = true
	t.mu.Unlock()
}

func (t *simpleTokens) disable() {
	t.mu.Lock()
	t.enabled = false
	t.tokens = map[string]simpleToken{}
	t.mu.Unlock()
}

func (t *simpleTokens) invalidateUser(user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, v := range t.tokens {
		if v.user == user {
			delete(t.tokens, k)
		}
	}
}

package lease

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestMinTTLFollowsEtcd(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		election, heartbeat time.Duration
		want                int64
	}{
		{1000 * ms, 100 * ms, 2},  // etcd defaults: 15 ticks = 1.5 s
		{5000 * ms, 500 * ms, 8},  // 15 ticks of 500 ms = 7.5 s
		{1050 * ms, 100 * ms, 2},  // 10 whole ticks, as etcd counts them
		{3000 * ms, 1000 * ms, 4}, // (3*3)/2 = 4 ticks: integer halving
		{100 * ms, 100 * ms, 1},   // 1 tick -> 1 heartbeat -> at least 1 s
	} {
		if got := MinTTL(c.election, c.heartbeat); got != c.want {
			t.Errorf("MinTTL(%v, %v) = %d, want %d", c.election, c.heartbeat, got, c.want)
		}
	}
}

func TestGrantTTLRules(t *testing.T) {
	e := newEnv(t, Config{MinTTL: 5})
	for _, c := range []struct {
		id, ttl, want int64
		err           error
	}{
		{id: 1, ttl: 1, want: 5},
		{id: 2, ttl: 0, want: 5},
		{id: 3, ttl: -7, want: 5},
		{id: 4, ttl: 60, want: 60},
		{id: 5, ttl: MaxLeaseTTL, want: MaxLeaseTTL},
		{id: 6, ttl: MaxLeaseTTL + 1, err: ErrLeaseTTLTooLarge},
		{id: 4, ttl: 30, err: ErrLeaseExists},
		{id: NoLease, ttl: 30, err: ErrLeaseNotFound},
	} {
		got, err := e.le.Grant(e.next(), 1, c.id, c.ttl)
		if !errors.Is(err, c.err) || (c.err == nil && got != c.want) {
			t.Errorf("Grant(%d, %d) = %d, %v; want %d, %v", c.id, c.ttl, got, err, c.want, c.err)
		}
	}
	if info, ok := e.le.Lookup(4); !ok || info.TTL != 60 || info.Remaining != Forever {
		t.Errorf("Lookup(4) on a non-primary = %+v, %v; want TTL 60 with no clock", info, ok)
	}
	if _, ok := e.le.Lookup(6); ok {
		t.Error("a grant that failed left a lease")
	}
	if got, want := e.le.Leases(), []int64{1, 2, 3, 4, 5}; !slices.Equal(got, want) {
		t.Errorf("Leases() = %v, want %v", got, want)
	}
	// Failed grants are applied entries too: the last index is recorded.
	if err := e.be.ForceCommit(); err != nil {
		t.Fatal(err)
	}
	if got := e.be.ConsistentIndex(); got != e.ci {
		t.Errorf("consistent index %d after failed grants, want %d", got, e.ci)
	}
}

func TestRenewRules(t *testing.T) {
	clk := newFakeClock()
	waiting := make(chan int64, 4)
	e := newEnv(t, Config{MinTTL: 1, now: clk.now, renewWaits: func(id int64) { waiting <- id }})
	// Bounded, so that a Renew that never wakes fails the test instead of
	// hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.grant(1, 10)
	if _, err := e.le.Renew(ctx, 1); !errors.Is(err, ErrNotPrimary) {
		t.Fatalf("Renew on a non-primary: %v, want ErrNotPrimary", err)
	}
	e.le.Promote(0)
	if _, err := e.le.Renew(ctx, 99); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("Renew of an unknown lease: %v, want ErrLeaseNotFound", err)
	}
	clk.advance(7 * time.Second)
	if info, _ := e.le.TimeToLive(1, false); info.TTLSeconds() != 3 || info.TTL != 10 {
		t.Fatalf("after 7 s: TTL %d remaining %d, want 10 and 3", info.TTL, info.TTLSeconds())
	}
	ttl, err := e.le.Renew(ctx, 1)
	if err != nil || ttl != 10 {
		t.Fatalf("Renew = %d, %v; want 10", ttl, err)
	}
	if info, _ := e.le.TimeToLive(1, false); info.Remaining != 10*time.Second {
		t.Fatalf("after renew: remaining %v, want 10s", info.Remaining)
	}

	// An expired lease is not renewed: Renew waits for its revoke.
	clk.advance(11 * time.Second)
	res := make(chan error, 1)
	go func() {
		_, err := e.le.Renew(ctx, 1)
		res <- err
	}()
	select {
	case id := <-waiting:
		if id != 1 {
			t.Fatalf("Renew waits for lease %d, want 1", id)
		}
	case err := <-res:
		t.Fatalf("Renew of an expired lease returned %v before its revoke", err)
	}
	if _, err := e.le.RevokeAndDelete(e.next(), 1, 1, e.store); err != nil {
		t.Fatal(err)
	}
	if err := <-res; !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("Renew waiting on a revoked lease: %v, want ErrLeaseNotFound", err)
	}

	// ... or for a demotion.
	e.grant(2, 5)
	clk.advance(6 * time.Second)
	go func() {
		_, err := e.le.Renew(ctx, 2)
		res <- err
	}()
	select {
	case <-waiting: // Renew is waiting when the demotion comes
	case err := <-res:
		t.Fatalf("Renew of an expired lease returned %v before the demotion", err)
	}
	e.le.Demote()
	if err := <-res; !errors.Is(err, ErrNotPrimary) {
		t.Fatalf("Renew waiting across a demotion: %v, want ErrNotPrimary", err)
	}
}

func TestTimeToLive(t *testing.T) {
	clk := newFakeClock()
	e := newEnv(t, Config{now: clk.now})
	e.grant(1, 30)
	if _, err := e.le.TimeToLive(1, true); !errors.Is(err, ErrNotPrimary) {
		t.Fatalf("TimeToLive on a non-primary: %v, want ErrNotPrimary", err)
	}
	e.le.Promote(0)
	if _, err := e.le.TimeToLive(2, true); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("TimeToLive of an unknown lease: %v, want ErrLeaseNotFound", err)
	}
	clk.advance(2500 * time.Millisecond)
	info, err := e.le.TimeToLive(1, true)
	if err != nil {
		t.Fatal(err)
	}
	// etcd truncates: 27.5 s left is reported as 27.
	if info.TTL != 30 || info.TTLSeconds() != 27 || len(info.Keys) != 0 {
		t.Fatalf("TimeToLive = %+v (TTLSeconds %d); want granted 30, 27 left, no keys", info, info.TTLSeconds())
	}
}

// TestKeysOnEveryMember: the keys of a lease (what apply-time permission
// checks look at) are known on a non-primary lessor too, where TimeToLive
// refuses to answer.
func TestKeysOnEveryMember(t *testing.T) {
	e := newEnv(t, Config{})
	e.grant(1, 30)
	e.grant(2, 30)
	e.le.Attach(1, []byte("b"))
	e.le.Attach(1, []byte("a"))
	if keys, ok := e.le.Keys(1); !ok || len(keys) != 2 || string(keys[0]) != "a" || string(keys[1]) != "b" {
		t.Errorf("Keys(1) on a non-primary = %q, %v; want [a b], true", keys, ok)
	}
	if keys, ok := e.le.Keys(2); !ok || keys == nil || len(keys) != 0 {
		t.Errorf("Keys(2) = %q (nil %v), %v; want empty non-nil, true", keys, keys == nil, ok)
	}
	if keys, ok := e.le.Keys(3); ok || keys != nil {
		t.Errorf("Keys(3) of an unknown lease = %q, %v; want nil, false", keys, ok)
	}
}

func TestPromoteAndDemote(t *testing.T) {
	clk := newFakeClock()
	e := newEnv(t, Config{now: clk.now})
	e.le.Promote(0)
	e.grant(1, 10)
	clk.advance(8 * time.Second)
	if info, _ := e.le.Lookup(1); info.Remaining != 2*time.Second {
		t.Fatalf("remaining %v, want 2s", info.Remaining)
	}
	e.le.Demote()
	if e.le.IsPrimary() {
		t.Fatal("IsPrimary after Demote")
	}
	if info, _ := e.le.Lookup(1); info.Remaining != Forever {
		t.Fatalf("remaining on a demoted lessor %v, want Forever", info.Remaining)
	}
	clk.advance(time.Hour)
	// A new leader gives every lease its full TTL plus the election timeout.
	e.le.Promote(time.Second)
	if info, _ := e.le.Lookup(1); info.Remaining != 11*time.Second {
		t.Fatalf("remaining after Promote(1s) %v, want 11s", info.Remaining)
	}
	// A grant on a non-primary starts no clock until Promote.
	e.le.Demote()
	e.grant(2, 20)
	if info, _ := e.le.Lookup(2); info.Remaining != Forever {
		t.Fatalf("grant on a non-primary: remaining %v, want Forever", info.Remaining)
	}
	e.le.Promote(0)
	if info, _ := e.le.Lookup(2); info.Remaining != 20*time.Second {
		t.Fatalf("after Promote: remaining %v, want 20s", info.Remaining)
	}
}

// With at least RevokeRate leases, Promote spreads expiries so that no
// one-second window holds more than 3/4 of the rate.
func TestPromoteSpreadsExpiries(t *testing.T) {
	clk := newFakeClock()
	e := newEnv(t, Config{now: clk.now, RevokeRate: 8})
	const n = 40
	for id := int64(1); id <= n; id++ {
		e.grant(id, 10)
	}
	e.grant(n+1, 100) // far from the crowd: must not move
	e.le.Promote(0)
	var rem []time.Duration
	for id := int64(1); id <= n; id++ {
		info, _ := e.le.Lookup(id)
		if info.Remaining < 10*time.Second {
			t.Fatalf("lease %d moved earlier: %v", id, info.Remaining)
		}
		rem = append(rem, info.Remaining)
	}
	slices.Sort(rem)
	target := 3 * 8 / 4
	for i := range rem {
		in := 0
		for j := i; j < len(rem) && rem[j]-rem[i] < time.Second; j++ {
			in++
		}
		if in > target {
			t.Fatalf("%d leases expire within 1s of %v; want at most %d", in, rem[i], target)
		}
	}
	if info, _ := e.le.Lookup(n + 1); info.Remaining != 100*time.Second {
		t.Fatalf("lone lease moved to %v", info.Remaining)
	}
}

// The record encoding must match etcd's leasepb.Lease byte for byte: the
// golden values are proto.Marshal output of etcd v3.7.3's generated code.
func TestRecordEncodingMatchesLeasepb(t *testing.T) {
	for _, c := range []struct {
		r      record
		golden string
	}{
		{record{ID: 0x1234abcd, TTL: 60}, "08cdd7d29101103c"},
		{record{ID: 7, TTL: 9000000000, RemainingTTL: 42}, "08071080b4c4c321182a"},
		{record{ID: -5, TTL: 1}, "08fbffffffffffffffff011001"},
		{record{ID: 1}, "0801"},
	} {
		if got := hex.EncodeToString(c.r.marshal()); got != c.golden {
			t.Errorf("marshal %+v = %s, want %s", c.r, got, c.golden)
		}
		b, _ := hex.DecodeString(c.golden)
		if got, err := unmarshal(b); err != nil || got != c.r {
			t.Errorf("unmarshal %s = %+v, %v; want %+v", c.golden, got, err, c.r)
		}
	}
	// Unknown fields (a newer writer) are skipped, not fatal.
	b := record{ID: 9, TTL: 3}.marshal()
	b = protowire.AppendTag(b, 7, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("future"))
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 2)
	if got, err := unmarshal(b); err != nil || got != (record{ID: 9, TTL: 3, RemainingTTL: 2}) {
		t.Errorf("unmarshal with an unknown field = %+v, %v", got, err)
	}
	if _, err := unmarshal([]byte{0x08}); err == nil {
		t.Error("a truncated record decoded without error")
	}
}

func TestLeasesOrder(t *testing.T) {
	clk := newFakeClock()
	e := newEnv(t, Config{now: clk.now})
	e.grant(5, 10)
	e.grant(3, 30)
	e.grant(4, 20)
	if got := e.le.Leases(); !slices.Equal(got, []int64{3, 4, 5}) {
		t.Fatalf("Leases() on a non-primary = %v, want by ID [3 4 5]", got)
	}
	e.le.Promote(0)
	if got := e.le.Leases(); !slices.Equal(got, []int64{5, 4, 3}) {
		t.Fatalf("Leases() on the primary = %v, want soonest expiry first [5 4 3]", got)
	}
}

// TestPromotedC: the channel lease RPCs wait on between a member becoming
// leader and its lessor's promotion is closed exactly while primary.
func TestPromotedC(t *testing.T) {
	e := newEnv(t, Config{MinTTL: 1})
	isClosed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	before := e.le.PromotedC()
	if isClosed(before) {
		t.Fatal("PromotedC closed before any Promote")
	}
	e.le.Promote(0)
	if !isClosed(before) || !isClosed(e.le.PromotedC()) {
		t.Fatal("Promote did not close PromotedC")
	}
	e.le.Promote(0) // promoting twice must not close it twice
	e.le.Demote()
	after := e.le.PromotedC()
	if isClosed(after) {
		t.Fatal("PromotedC closed after Demote")
	}
	e.le.Promote(0)
	if !isClosed(after) {
		t.Fatal("a second Promote did not close the new PromotedC")
	}
}

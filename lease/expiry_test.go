package lease

import (
	"slices"
	"testing"
	"time"
)

// expectExpired waits for the next batch on ExpiredLeasesC.
func expectExpired(t *testing.T, le *Lessor, want ...int64) {
	t.Helper()
	select {
	case got := <-le.ExpiredLeasesC():
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("expired %v, want %v", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no expired leases delivered, want %v", want)
	}
}

// expectNoExpired checks that nothing is delivered for a few ticks.
func expectNoExpired(t *testing.T, le *Lessor, why string) {
	t.Helper()
	select {
	case got := <-le.ExpiredLeasesC():
		t.Fatalf("%s: expired %v delivered, want none", why, got)
	case <-time.After(60 * time.Millisecond):
	}
}

func TestExpiryOnlyOnPrimary(t *testing.T) {
	clk := newFakeClock()
	e := newEnv(t, Config{now: clk.now, tick: 5 * time.Millisecond, ExpiredRetryInterval: 3 * time.Second})
	e.grant(1, 10)
	e.grant(2, 20)
	e.mustPut("k", 1)
	clk.advance(time.Hour)
	expectNoExpired(t, e.le, "not primary")

	e.le.Promote(0)
	clk.advance(5 * time.Second)
	expectNoExpired(t, e.le, "nothing due yet")
	clk.advance(6 * time.Second)
	expectExpired(t, e.le, 1)
	// Expiry only reports: the lease and its key stay until the revoke
	// comes back through raft.
	if !e.le.Exists(1) || !slices.Equal(e.rangeAt(0), []string{"k"}) {
		t.Fatal("expiry deleted the lease or its key locally")
	}
	expectNoExpired(t, e.le, "reported, retry not due")
	clk.advance(3 * time.Second)
	expectExpired(t, e.le, 1) // the revoke never came: report it again

	if _, err := e.le.RevokeAndDelete(e.next(), 1, 1, e.store); err != nil {
		t.Fatal(err)
	}
	clk.advance(7 * time.Second) // 21 s: lease 2 is due, lease 1 is gone
	expectExpired(t, e.le, 2)
	if _, err := e.le.RevokeAndDelete(e.next(), 1, 2, e.store); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Hour)
	expectNoExpired(t, e.le, "all revoked")

	// A renewed lease is not reported at its old expiry.
	e.grant(3, 10)
	clk.advance(8 * time.Second)
	if _, err := e.le.Renew(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	clk.advance(8 * time.Second)
	expectNoExpired(t, e.le, "renewed")
	clk.advance(3 * time.Second)
	expectExpired(t, e.le, 3)

	// A demoted lessor stops reporting.
	e.grant(4, 10)
	e.le.Demote()
	clk.advance(time.Hour)
	expectNoExpired(t, e.le, "demoted")
}

func TestExpiryRateLimit(t *testing.T) {
	clk := newFakeClock()
	// 400 per second at one check per 10 ms: 4 per check.
	e := newEnv(t, Config{now: clk.now, tick: 10 * time.Millisecond, RevokeRate: 400})
	const n = 10
	for id := int64(1); id <= n; id++ {
		e.grant(id, 10)
	}
	e.le.Promote(0)
	clk.advance(11 * time.Second)
	seen := map[int64]bool{}
	for len(seen) < n {
		select {
		case ids := <-e.le.ExpiredLeasesC():
			if len(ids) > 4 {
				t.Fatalf("batch of %d expired leases, want at most 4 per check", len(ids))
			}
			for _, id := range ids {
				if seen[id] {
					t.Fatalf("lease %d reported twice before its retry interval", id)
				}
				seen[id] = true
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of %d expired leases delivered", len(seen), n)
		}
	}
}

// The whole loop with the real clock and etcd's 500 ms check: a server
// goroutine turns expired IDs into applied revokes, and the key goes.
func TestExpiryEndToEnd(t *testing.T) {
	e := newEnv(t, Config{MinTTL: 1})
	e.le.Promote(0)
	e.grant(1, 1)
	e.mustPut("short", 1)
	e.mustPut("stays", 0)
	start := time.Now()
	select {
	case ids := <-e.le.ExpiredLeasesC():
		if !slices.Equal(ids, []int64{1}) {
			t.Fatalf("expired %v, want [1]", ids)
		}
		if d := time.Since(start); d < 900*time.Millisecond {
			t.Fatalf("a 1 s lease was reported expired after %v", d)
		}
		// The server would propose LeaseRevoke; this is its apply.
		if _, err := e.le.RevokeAndDelete(e.next(), 1, ids[0], e.store); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a 1 s lease was not reported within 5 s")
	}
	if got := e.rangeAt(0); !slices.Equal(got, []string{"stays"}) {
		t.Fatalf("keys after expiry %v, want [stays]", got)
	}
}

package lease

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkRenew measures a keep-alive on the primary: the RPC-side cost
// that scales with clients, since renewals never go through raft.
func BenchmarkRenew(b *testing.B) {
	e := newEnv(b, Config{})
	const n = 10000
	for id := int64(1); id <= n; id++ {
		e.grant(id, 60)
	}
	e.le.Promote(0)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.le.Renew(ctx, int64(i%n)+1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAttachDetach measures the hooks the mvcc store calls from the
// apply goroutine on every leased put.
func BenchmarkAttachDetach(b *testing.B) {
	e := newEnv(b, Config{})
	e.grant(1, 60)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key-%04d", i))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := keys[i%len(keys)]
		e.le.Attach(1, k)
		e.le.Detach(1, k)
	}
}

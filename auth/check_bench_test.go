package auth

import (
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
)

// BenchmarkIsRangePermitted measures the per-request check for a user
// whose role has many prefix permissions.
func BenchmarkIsRangePermitted(b *testing.B) {
	e := newEnv(b)
	e.setupRoot()
	e.must(e.userAdd("u", "pw"))
	e.must(e.roleAdd("r"))
	for i := range 200 {
		p := fmt.Sprintf("/app/%03d/", i)
		e.must(e.grantPerm("r", authpb.Permission_READ, p, p[:len(p)-1]+"0"))
	}
	e.must(e.grantRole("u", "r"))
	e.must(e.enable())
	ai := &AuthInfo{Username: "u", Revision: e.s.Revision()}
	key := []byte("/app/123/key")
	b.ResetTimer()
	for b.Loop() {
		if err := e.s.IsRangePermitted(ai, key, nil); err != nil {
			b.Fatal(err)
		}
	}
}

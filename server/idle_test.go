package server

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/internal/poll"
)

// TestIdleTrimAfterBurst: once a burst of writes is over, the member gives
// its writer buffers and garbage back (once per burst), and the page store
// serves and takes writes as before after each trim.
func TestIdleTrimAfterBurst(t *testing.T) {
	var trims atomic.Int32
	c := newTestClusterHooked(t, 1, storageHooks{idleTrimInterval: 20 * time.Millisecond, idleTrimmed: func() { trims.Add(1) }})
	m := c.members[0]
	for burst := 1; burst <= 2; burst++ {
		before := trims.Load()
		for i := 0; i < 300; i++ {
			mustPut(t, m, fmt.Sprintf("b%d/%03d", burst, i), fmt.Sprintf("v%d", i))
		}
		poll.Until(t, fmt.Sprintf("a trim after burst %d", burst), func() bool { return trims.Load() > before })
		resp, err := m.kv.Range(ctxT(t), &pb.RangeRequest{Key: []byte(fmt.Sprintf("b%d/", burst)), RangeEnd: []byte(fmt.Sprintf("b%d0", burst))})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 300 || string(resp.Kvs[299].Value) != "v299" {
			t.Fatalf("after the trim of burst %d: %d keys, last %q", burst, len(resp.Kvs), resp.Kvs[len(resp.Kvs)-1].Value)
		}
	}
}

//go:build leasecheckpoint

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

// TestLeaseCheckpointGateDiff is the LeaseCheckpoint gate beside etcd
// 3.7.3, on and off: a lease of an hour is granted, the member runs past
// etcd's fixed checkpoint interval (5 minutes), and is restarted. With
// the gate the restarted member carries on from the checkpointed
// remaining TTL; without it (the default) the lease starts its hour over.
// The four servers run side by side, and the test takes about 6 minutes
// (etcd's interval is not configurable), so it is built only with the
// leasecheckpoint tag: make lease-checkpoint-long.
func TestLeaseCheckpointGateDiff(t *testing.T) {
	b := needBins(t)
	const ttl = 3600
	type run struct {
		label string
		bin   string
		gate  bool
		after int64 // the remaining TTL after the restart
	}
	var runs []*run
	for _, gate := range []bool{true, false} {
		runs = append(runs, &run{"etcd", b.Etcd, gate, 0}, &run{"target", targetBin(t, b), gate, 0})
	}
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			flags := []string{fmt.Sprintf("--feature-gates=LeaseCheckpoint=%v", r.gate)}
			if r.gate {
				flags = []string{"--feature-gates=LeaseCheckpoint=true,LeaseCheckpointPersist=true"}
			}
			srv, err := harness.NewServer(harness.ServerConfig{Bin: r.bin, Dir: t.TempDir(), Flags: flags})
			if err != nil {
				t.Error(err)
				return
			}
			if err := srv.Start(); err != nil {
				t.Error(err)
				return
			}
			defer srv.Stop()
			cli := memberClient(t, srv)
			ctx := context.Background()
			g, err := cli.Grant(ctx, ttl)
			if err != nil {
				t.Error(err)
				return
			}
			// Past the first checkpoint (at 5 minutes) by half a minute.
			if err := linPoll(7*time.Minute, time.Second, "the lease to run 330 s", func() bool {
				l, err := cli.TimeToLive(ctx, g.ID)
				return err == nil && l.TTL <= ttl-330
			}); err != nil {
				t.Error(err)
				return
			}
			cli.Close()
			if err := srv.Restart(); err != nil {
				t.Error(err)
				return
			}
			cli = memberClient(t, srv)
			var l *clientv3.LeaseTimeToLiveResponse
			poll.UntilNil(t, r.label+": the lease after the restart", func() error {
				l, err = cli.TimeToLive(ctx, g.ID)
				return err
			})
			r.after = l.TTL
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, r := range runs {
		// With checkpoints the lease carries on from at most 3300 s
		// (the checkpoint at 5 minutes); without, from the full hour
		// (less the second a restart takes).
		checkpointed := r.after <= ttl-300
		t.Logf("LEASE-CHECKPOINT: %s LeaseCheckpoint=%v: remaining TTL after the restart %d s (granted %d s)", r.label, r.gate, r.after, ttl)
		if checkpointed != r.gate {
			t.Errorf("%s with LeaseCheckpoint=%v: remaining TTL %d s after the restart", r.label, r.gate, r.after)
		}
	}
}

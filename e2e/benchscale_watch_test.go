package e2e

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/strata-db/strata/internal/poll"
)

// rowWatch is row 13: watchers spread over prefixes and streams that
// read every event, beside streams that never read, under a fixed-rate
// load of stamped 2 KiB puts, one prefix after the other. It reports
// each event's delay from the put's send to its receipt (p99 and max)
// and the server's anonymous RSS before the watchers, with them, and
// after the puts: what the never-reading streams make it hold shows in
// the last step.
func (sb *bscaleBench) rowWatch(side *bscaleSide) {
	t := sb.t
	c := sb.cfg
	addr := strings.TrimPrefix(side.srv.ClientURL, "http://")
	before, err := bsSettledRSS(side.srv, side.srv.ClientURL)
	if err != nil {
		t.Fatalf("%s: RssAnon before the watchers: %v", side.label, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var opened []*grpc.ClientConn
	defer func() {
		for _, c := range opened {
			c.Close()
		}
	}()
	dial := func(opts ...grpc.DialOption) *grpc.ClientConn {
		conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
		if err != nil {
			t.Fatalf("%s: watch connection: %v", side.label, err)
		}
		opened = append(opened, conn)
		return conn
	}
	prefix := func(p int) string { return fmt.Sprintf("/bench/watch/p%04d/", p) }
	create := func(ws pb.Watch_WatchClient, p string) {
		err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
			Key: []byte(p), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(p))}}})
		if err != nil {
			t.Fatalf("%s: watch create on %s: %v", side.label, p, err)
		}
	}
	awaitCreated := func(ws pb.Watch_WatchClient, n int) {
		for created := 0; created < n; {
			resp, err := ws.Recv()
			if err != nil {
				t.Fatalf("%s: watch stream: %v", side.label, err)
			}
			if resp.Canceled {
				t.Fatalf("%s: watch %d canceled: %s", side.label, resp.WatchId, resp.CancelReason)
			}
			if resp.Created {
				created++
			}
		}
	}

	// The reading streams, ten to a connection; watcher w of stream s
	// watches prefix (s × per + w) modulo the prefix count, so a stream
	// holds distinct prefixes and a prefix is watched from several
	// streams.
	per := c.watchers / c.watchStreams
	var conns []*grpc.ClientConn
	for i := 0; i < max(1, c.watchStreams/10); i++ {
		conns = append(conns, dial())
	}
	var received, bad atomic.Int64
	delays := make([][]time.Duration, c.watchStreams)
	var readers sync.WaitGroup
	for s := 0; s < c.watchStreams; s++ {
		ws, err := pb.NewWatchClient(conns[s%len(conns)]).Watch(ctx)
		if err != nil {
			t.Fatalf("%s: watch stream %d: %v", side.label, s, err)
		}
		for w := 0; w < per; w++ {
			create(ws, prefix((s*per+w)%c.watchPrefixes))
		}
		awaitCreated(ws, per)
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				resp, err := ws.Recv()
				if err != nil {
					return
				}
				now := time.Now()
				for _, ev := range resp.Events {
					sent, ok := bsStampOf(ev.Kv.Value)
					if !ok {
						bad.Add(1)
						continue
					}
					delays[s] = append(delays[s], now.Sub(sent))
				}
				received.Add(int64(len(resp.Events)))
			}
		}()
	}
	// The streams that never read, on connections of their own with
	// gRPC's smallest flow-control windows (64 KiB), so what the server
	// sends them piles up on its side: each reads its watch's created
	// response, then nothing.
	var idleConns []*grpc.ClientConn
	for i := 0; i < max(1, c.watchIdleStreams/10); i++ {
		idleConns = append(idleConns, dial(grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10)))
	}
	for s := 0; s < c.watchIdleStreams; s++ {
		ws, err := pb.NewWatchClient(idleConns[s%len(idleConns)]).Watch(ctx)
		if err != nil {
			t.Fatalf("%s: never-reading watch stream %d: %v", side.label, s, err)
		}
		create(ws, "/bench/watch/")
		awaitCreated(ws, 1)
	}
	withWatchers, err := bsSettledRSS(side.srv, side.srv.ClientURL)
	if err != nil {
		t.Fatalf("%s: RssAnon with the watchers: %v", side.label, err)
	}

	load, err := bsStartPutLoad([]string{side.srv.ClientURL}, c.watchRate, 2048, sb.cfg.seed,
		func(n int) string { return fmt.Sprintf("%s%08d", prefix(n%c.watchPrefixes), n) }, true)
	if err != nil {
		t.Fatalf("%s: put load: %v", side.label, err)
	}
	puts := c.watchRate * int(c.watchFor/time.Second)
	poll.UntilNilWithin(t, time.Hour, 10*time.Millisecond, side.label+": the watch row's puts", func() error {
		if n := load.count(); n < puts {
			return fmt.Errorf("%d of %d puts", n, puts)
		}
		return nil
	})
	after := rssAnon(side.srv.Pid())
	samples := load.finish()
	ok := 0
	for _, s := range samples {
		if s.err == nil {
			ok++
		}
	}
	if failed := len(samples) - ok; failed > 0 {
		side.note["watch.p99"] = fmt.Sprintf("%d of %d puts failed: %v", failed, len(samples), bsFirstErr(samples))
		sb.t.Logf("SCALE %s: %s", side.label, side.note["watch.p99"])
		if side == sb.sides[1] {
			t.Errorf("%s: %s", side.label, side.note["watch.p99"])
		}
	}
	// Every event the reading watchers are owed: each put's prefix has
	// watchers/prefixes of them.
	want := int64(ok * (c.watchers / c.watchPrefixes))
	waitUntil := time.Now().Add(5 * time.Minute)
	for received.Load() < want && time.Now().Before(waitUntil) {
		time.Sleep(10 * time.Millisecond)
	}
	got := received.Load()
	cancel()
	readers.Wait()
	if got != want || bad.Load() > 0 {
		msg := fmt.Sprintf("the watchers received %d events of %d (%d without a stamp)", got, want, bad.Load())
		side.note["watch.max"] = msg
		t.Logf("SCALE %s: %s", side.label, msg)
		if side == sb.sides[1] {
			t.Errorf("%s: %s", side.label, msg)
		}
	}
	var all []time.Duration
	for _, d := range delays {
		all = append(all, d...)
	}
	if len(all) == 0 {
		t.Fatalf("%s: no watch event received", side.label)
	}
	slices.Sort(all)
	p99 := all[min(len(all)-1, int(math.Ceil(0.99*float64(len(all))))-1)]
	side.set("watch.p99", p99.Seconds())
	side.set("watch.max", all[len(all)-1].Seconds())
	side.set("watch.rss.before", float64(before))
	side.set("watch.rss.watchers", float64(withWatchers))
	side.set("watch.rss.after", float64(after))
	side.set("watch.unbounded", float64(int64(c.watchIdleStreams)*int64(ok)*2048))
	if side.note["watch.p99"] == "" {
		side.note["watch.p99"] = fmt.Sprintf("%d events", len(all))
	}
	t.Logf("SCALE watchers %s: %d puts, %d events: delay p99 %s, max %s; RssAnon %s before, %s with the watchers, %s after the puts",
		side.label, ok, len(all), bscaleDur(p99.Seconds()), bscaleDur(all[len(all)-1].Seconds()), bscaleSize(before), bscaleSize(withWatchers), bscaleSize(after))
}

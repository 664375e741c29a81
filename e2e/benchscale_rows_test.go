package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/klauspost/compress/s2"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

func bsS2Len(v []byte) int { return len(s2.Encode(nil, v)) }

// rowFootprint is row 2: the data dir's size once the load is done.
func (sb *bscaleBench) rowFootprint(side *bscaleSide) {
	app, alloc, err := bsDirUsage(side.srv.DataDir)
	if err != nil {
		sb.t.Fatalf("%s: du %s: %v", side.label, side.srv.DataDir, err)
	}
	side.set("du.apparent", float64(app))
	side.set("du.allocated", float64(alloc))
	sb.t.Logf("SCALE footprint %s: %s apparent, %s allocated", side.label, bscaleSize(app), bscaleSize(alloc))
}

// rowIdleMemory is row 10: the idle server's anonymous RSS after the
// load, once a collection has run and the runtime has given back what
// it freed (an idle server gets there by itself within minutes); and
// after a restart, which the restart row measures when it runs.
func (sb *bscaleBench) rowIdleMemory(side *bscaleSide) {
	t := sb.t
	v, err := bsSettledRSS(side.srv, side.srv.ClientURL)
	if err != nil {
		t.Fatalf("%s: idle RssAnon: %v", side.label, err)
	}
	side.set("mem.idle", float64(v))
	t.Logf("SCALE idle memory %s: RssAnon %s after the load", side.label, bscaleSize(v))
	if sb.cfg.rows[3] {
		return
	}
	if err := side.srv.Restart(); err != nil {
		t.Fatalf("%s: restart: %v", side.label, err)
	}
	sb.connect(side)
	sb.measureRestartMemory(side)
}

func (sb *bscaleBench) measureRestartMemory(side *bscaleSide) {
	v, err := bsSettledRSS(side.srv, side.srv.ClientURL)
	if err != nil {
		sb.t.Fatalf("%s: idle RssAnon after a restart: %v", side.label, err)
	}
	side.set("mem.restart", float64(v))
	sb.t.Logf("SCALE idle memory %s: RssAnon %s after a restart", side.label, bscaleSize(v))
}

// knownKey is a live key the restart row reads, with its value.
func (sb *bscaleBench) knownKey() (string, []byte) {
	for i := 0; i < sb.plan.keys; i++ {
		if k := sb.plan.key(i); !k.deleted && !k.churn {
			return k.key, sb.plan.value(nil, k, k.lastVersion())
		}
	}
	sb.t.Fatal("the plan has no live key")
	return "", nil
}

// rowRestart is row 3: the time from starting the process to the first
// successful serializable Get of a known key, with the data dir's pages
// dropped from the page cache first: after kill -9, after SIGTERM, and
// (the baseline) on an empty data dir; and the anonymous RSS 5 s after
// that first read.
func (sb *bscaleBench) rowRestart(side *bscaleSide) {
	t := sb.t
	key, val := sb.knownKey()
	sb.closeClients(side)
	if err := side.srv.Kill(); err != nil {
		t.Fatalf("%s: kill -9: %v", side.label, err)
	}
	sb.cold(side.srv.DataDir)
	d, rss := sb.timedStart(side, side.srv, key, val, true)
	side.set("restart.kill", d.Seconds())
	side.set("restart.kill.rss", float64(rss))
	t.Logf("SCALE restart %s: after kill -9, first read %s after the start; RssAnon %s 5 s later", side.label, bscaleDur(d.Seconds()), bscaleSize(rss))

	// How long the stop takes, to the process's exit: what a supervisor
	// waits before it may start the member again (Strata may write its
	// index base on the way out, mvcc/indexbase.go).
	t0 := time.Now()
	if err := side.srv.Stop(); err != nil {
		t.Fatalf("%s: stop (SIGTERM): %v", side.label, err)
	}
	side.set("restart.stop", time.Since(t0).Seconds())
	t.Logf("SCALE restart %s: SIGTERM to exit in %s", side.label, bscaleDur(time.Since(t0).Seconds()))
	sb.cold(side.srv.DataDir)
	d, rss = sb.timedStart(side, side.srv, key, val, true)
	side.set("restart.term", d.Seconds())
	side.set("restart.term.rss", float64(rss))
	t.Logf("SCALE restart %s: after SIGTERM, first read %s after the start; RssAnon %s 5 s later", side.label, bscaleDur(d.Seconds()), bscaleSize(rss))
	sb.connect(side)
	if sb.cfg.rows[10] {
		sb.measureRestartMemory(side)
	}

	dir := sb.mkdir(side.label + "-empty")
	empty := sb.newServer(side, dir)
	sb.cold(dir)
	d, _ = sb.timedStart(side, empty, key, nil, false)
	side.set("restart.empty", d.Seconds())
	t.Logf("SCALE restart %s: on an empty data dir, first read %s after the start", side.label, bscaleDur(d.Seconds()))
	if err := empty.Stop(); err != nil {
		t.Fatalf("%s: stop the empty-dir server: %v", side.label, err)
	}
	os.RemoveAll(dir)
}

// cold drops dir's pages from the page cache and records how.
func (sb *bscaleBench) cold(dir string) {
	how, err := bsColdCache(dir)
	if err != nil {
		sb.t.Fatalf("cold cache: %v", err)
	}
	sb.coldHow = how
}

// timedStart starts srv and polls it with serializable Gets of key
// (250 ms each, from a connection that reconnects within 20 ms) until
// one succeeds; that Get must return val (nil: the key must be absent).
// It returns the time from the start to that read and, with rss, the
// anonymous RSS 5 s after it.
func (sb *bscaleBench) timedStart(side *bscaleSide, srv *harness.Server, key string, val []byte, rss bool) (time.Duration, int64) {
	t := sb.t
	conn, err := bscaleConn(srv.ClientURL)
	if err != nil {
		t.Fatalf("%s: connection: %v", side.label, err)
	}
	defer conn.Close()
	kv := pb.NewKVClient(conn)
	started := make(chan error, 1)
	t0 := time.Now()
	go func() { started <- srv.Start() }()
	var resp *pb.RangeResponse
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		resp, err = kv.Range(ctx, &pb.RangeRequest{Key: []byte(key), Serializable: true})
		cancel()
		if err == nil {
			break
		}
		select {
		case serr := <-started:
			if serr != nil {
				t.Fatalf("%s: did not restart: %v", side.label, serr)
			}
			started <- nil
		default:
		}
		if time.Since(t0) > time.Hour {
			t.Fatalf("%s: no successful Get of %s within an hour of the start: %v", side.label, key, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	first := time.Now()
	d := first.Sub(t0)
	if err := <-started; err != nil {
		t.Fatalf("%s: did not restart: %v", side.label, err)
	}
	switch {
	case val == nil && len(resp.Kvs) != 0:
		t.Fatalf("%s: an empty data dir holds %s", side.label, key)
	case val != nil && (len(resp.Kvs) != 1 || !bytes.Equal(resp.Kvs[0].Value, val)):
		t.Fatalf("%s: after the restart %s reads %d kvs, not its value of %d bytes", side.label, key, len(resp.Kvs), len(val))
	}
	if !rss {
		return d, 0
	}
	time.Sleep(time.Until(first.Add(5 * time.Second)))
	return d, rssAnon(srv.Pid())
}

// bsListRequest is the list of rows 6 and 9: every object of
// bscaleListResource, unpaginated.
func bsListRequest() *pb.RangeRequest {
	p := "/registry/" + bscaleListResource + "/"
	return &pb.RangeRequest{Key: []byte(p), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(p))}
}

// rowStream is row 9: RangeStream of the list of row 6, then one unary
// list of the same, each timed with the server's peak extra anonymous
// RSS over a settled baseline. The row runs after the cold restarts of
// row 3, which leave etcd with its whole db file in the page cache (its
// restart reads every record) and Strata with almost none of it; so the
// list is read once before either is timed, and the two compare the
// reads, not one disk read against a cached one. That read is paginated
// (500 a page), so that it does not grow the server's heap by a whole
// list before the memory is measured.
func (sb *bscaleBench) rowStream(side *bscaleSide) {
	t := sb.t
	want := sb.plan.live[bscaleListResource]
	var sc bsRangeScan
	var msgs int
	var took time.Duration
	var err error
	warm := bsListRequest()
	warm.Limit = 500
	for err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		err = bsScanRange(ctx, side.conn, warm, &sc)
		cancel()
		if !sc.more {
			break
		}
		warm.Key = append(append(warm.Key[:0:0], sc.lastKey...), 0)
	}
	if err != nil {
		t.Fatalf("%s: the list before the stream: %v", side.label, err)
	}
	base, peak := sb.measureMemory(side, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		msgs, err = bsScanRangeStream(ctx, side.conn, bsListRequest(), &sc)
		took = time.Since(start)
	})
	if err != nil {
		t.Fatalf("%s: RangeStream of %s: %v", side.label, bscaleListResource, err)
	}
	if sc.kvs != want {
		t.Fatalf("%s: RangeStream of %s returned %d objects, want %d", side.label, bscaleListResource, sc.kvs, want)
	}
	streamBytes := sc.bytes
	side.set("stream.time", took.Seconds())
	// Zero when the stream fit in memory the server already held.
	side.set("stream.extra", float64(max(0, peak-base)))
	t.Logf("SCALE RangeStream %s: %d objects, %s in %d messages in %s; RssAnon %s → peak %s (+%s)", side.label, sc.kvs, bscaleSize(streamBytes), msgs,
		bscaleDur(took.Seconds()), bscaleSize(base), bscaleSize(peak), bscaleSize(peak-base))

	base, peak = sb.measureMemory(side, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		err = bsScanRange(ctx, side.conn, bsListRequest(), &sc)
		took = time.Since(start)
	})
	if err != nil {
		t.Fatalf("%s: unary list of %s: %v", side.label, bscaleListResource, err)
	}
	if sc.kvs != want {
		t.Fatalf("%s: the unary list of %s returned %d objects, want %d", side.label, bscaleListResource, sc.kvs, want)
	}
	side.set("list1.time", took.Seconds())
	// Zero, as for the stream, when the list fit in memory the server
	// already held.
	side.set("list1.extra", float64(max(0, peak-base)))
	side.note["stream.extra"] = fmt.Sprintf("%.2f× the %s streamed", float64(side.fig["stream.extra"])/float64(streamBytes), bscaleSize(streamBytes))
	side.note["list1.extra"] = fmt.Sprintf("%.2f× the %s response", float64(side.fig["list1.extra"])/float64(sc.bytes), bscaleSize(sc.bytes))
	side.note["stream.time"] = fmt.Sprintf("%.2f× the unary list's", side.fig["stream.time"]/took.Seconds())
	t.Logf("SCALE unary list %s: %d objects, %s in %s; RssAnon %s → peak %s (+%s)", side.label, sc.kvs, bscaleSize(sc.bytes),
		bscaleDur(took.Seconds()), bscaleSize(base), bscaleSize(peak), bscaleSize(peak-base))
}

// measureMemory runs f on a settled server (collected, RSS no longer
// falling) while sampling its anonymous RSS every 20 ms, and returns the
// baseline and the peak.
func (sb *bscaleBench) measureMemory(side *bscaleSide, f func()) (base, peak int64) {
	base, err := bsSettledRSS(side.srv, side.srv.ClientURL)
	if err != nil {
		sb.t.Fatalf("%s: memory baseline: %v", side.label, err)
	}
	return base, bsPeakRSS(side.srv.Pid(), f)
}

// rowLists is row 6: four unpaginated lists of bscaleListResource at
// once, each on a connection of its own; the time until all four are
// in, and the server's peak extra anonymous RSS for each byte it sent.
func (sb *bscaleBench) rowLists(side *bscaleSide) {
	t := sb.t
	want := sb.plan.live[bscaleListResource]
	var conns [4]*grpc.ClientConn
	for i := range conns {
		c, err := bscaleConn(side.srv.ClientURL)
		if err != nil {
			t.Fatalf("%s: connection: %v", side.label, err)
		}
		defer c.Close()
		conns[i] = c
		// Connected before the measurement.
		var sc bsRangeScan
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = bsScanRange(ctx, c, &pb.RangeRequest{Key: []byte("/registry/"), RangeEnd: []byte("/registry0"), CountOnly: true, Serializable: true}, &sc)
		cancel()
		if err != nil {
			t.Fatalf("%s: connecting: %v", side.label, err)
		}
	}
	var scans [4]bsRangeScan
	var errs [4]error
	var took time.Duration
	base, peak := sb.measureMemory(side, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		var wg sync.WaitGroup
		start := time.Now()
		for i := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = bsScanRange(ctx, conns[i], bsListRequest(), &scans[i])
			}()
		}
		wg.Wait()
		took = time.Since(start)
	})
	var size int64
	for i := range scans {
		if errs[i] != nil {
			t.Fatalf("%s: unary list %d of %s: %v", side.label, i+1, bscaleListResource, errs[i])
		}
		if scans[i].kvs != want {
			t.Fatalf("%s: unary list %d of %s returned %d objects, want %d", side.label, i+1, bscaleListResource, scans[i].kvs, want)
		}
		size = max(size, scans[i].bytes)
	}
	extra := peak - base
	side.set("list4.time", took.Seconds())
	side.set("list4.per", float64(extra)/float64(4*size))
	side.note["list4.per"] = fmt.Sprintf("+%s for 4 × %s", bscaleSize(extra), bscaleSize(size))
	t.Logf("SCALE unary lists %s: 4 × %d objects (%s each) in %s; RssAnon %s → peak %s (+%s, %.2f× the 4 responses)", side.label, want, bscaleSize(size),
		bscaleDur(took.Seconds()), bscaleSize(base), bscaleSize(peak), bscaleSize(extra), float64(extra)/float64(4*size))
}

// rowWalk is row 7: the list of row 6 (one resource, as kube-apiserver
// pages a LIST of a resource), 500 a page, each page starting after the
// last key of the one before, at one revision. Every page also counts
// the keys from its start to the end of the range (etcd's Range returns
// the count with a limit, and kube-apiserver reads it), so a walk costs
// both servers its length squared over 500: a walk of every key of the
// 10 GiB data set, 3.3 million, had not finished on etcd after an hour.
func (sb *bscaleBench) rowWalk(side *bscaleSide) {
	t := sb.t
	rev := sb.revision(side)
	var sc bsRangeScan
	list := bsListRequest()
	from := list.Key
	pages, kvs := 0, 0
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		err := bsScanRange(ctx, side.conn, &pb.RangeRequest{Key: from, RangeEnd: list.RangeEnd, Limit: 500, Revision: rev}, &sc)
		cancel()
		if err != nil {
			t.Fatalf("%s: page %d of the walk: %v", side.label, pages+1, err)
		}
		pages++
		kvs += sc.kvs
		if !sc.more {
			break
		}
		from = append(append(from[:0], sc.lastKey...), 0)
	}
	took := time.Since(start)
	if want := sb.plan.live[bscaleListResource]; kvs != want {
		t.Fatalf("%s: the walk read %d keys, want %d", side.label, kvs, want)
	}
	side.set("walk.pps", float64(pages)/took.Seconds())
	side.note["walk.pps"] = fmt.Sprintf("%d pages in %s", pages, bscaleDur(took.Seconds()))
	t.Logf("SCALE walk %s: %d pages (%d keys) in %s: %.0f pages/s", side.label, pages, kvs, bscaleDur(took.Seconds()), float64(pages)/took.Seconds())
}

// rowCountKeys is row 8: a count-only and a keys-only range over every
// key under /registry/.
func (sb *bscaleBench) rowCountKeys(side *bscaleSide) {
	t := sb.t
	all := func(mod func(*pb.RangeRequest)) (bsRangeScan, time.Duration) {
		r := &pb.RangeRequest{Key: []byte("/registry/"), RangeEnd: []byte("/registry0")}
		mod(r)
		var sc bsRangeScan
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		if err := bsScanRange(ctx, side.conn, r, &sc); err != nil {
			t.Fatalf("%s: range %v: %v", side.label, r, err)
		}
		return sc, time.Since(start)
	}
	sc, took := all(func(r *pb.RangeRequest) { r.CountOnly = true })
	if sc.count != int64(sb.plan.liveKeys) {
		t.Fatalf("%s: count-only says %d keys, want %d", side.label, sc.count, sb.plan.liveKeys)
	}
	side.set("count.time", took.Seconds())
	t.Logf("SCALE count-only %s: %d keys in %s", side.label, sc.count, bscaleDur(took.Seconds()))
	sc, took = all(func(r *pb.RangeRequest) { r.KeysOnly = true })
	if sc.kvs != sb.plan.liveKeys {
		t.Fatalf("%s: keys-only returned %d keys, want %d", side.label, sc.kvs, sb.plan.liveKeys)
	}
	side.set("keys.time", took.Seconds())
	t.Logf("SCALE keys-only %s: %d keys (%s) in %s", side.label, sc.kvs, bscaleSize(sc.bytes), bscaleDur(took.Seconds()))
}

// garbage is the number of revisions a compaction at the current
// revision removes once the compaction row has written its churn: every
// version but the last of a live key, every version and the tombstone
// of a deleted one.
func (p *bscalePlan) garbage() int {
	g := 0
	for i := 0; i < p.keys; i++ {
		k := p.key(i)
		puts := 1 + k.updates
		if k.churn {
			puts += len(bscaleChurnVersions)
		}
		if k.deleted {
			g += puts + 1
		} else {
			g += puts - 1
		}
	}
	return g
}

// underPutLoad runs op while the fixed-rate put load writes to the
// server from a client of its own, from a second before op. The
// latencies are those of the puts that overlapped op, or its first
// second if it was shorter.
func (sb *bscaleBench) underPutLoad(side *bscaleSide, prefix string, op func() error) (time.Duration, bsLatencyStats, error) {
	t := sb.t
	load, err := bsStartPutLoad([]string{side.srv.ClientURL}, sb.cfg.putRate, sb.cfg.putSize, sb.cfg.seed,
		func(n int) string { return fmt.Sprintf("%s/%08d", prefix, n) }, false)
	if err != nil {
		t.Fatalf("%s: put load: %v", side.label, err)
	}
	poll.Until(t, "a second of the put load", func() bool { return load.count() >= sb.cfg.putRate })
	from := time.Now()
	opErr := op()
	to := time.Now()
	// The window is at least a second long, so it holds puts however
	// fast op was.
	until := bsMaxTime(to, from.Add(time.Second))
	time.Sleep(time.Until(until))
	samples := load.finish()
	st := bsWindowStats(samples, from, until)
	if st.failed > 0 {
		side.note[prefix] = fmt.Sprintf("%d of %d puts failed: %v", st.failed, st.n, bsFirstErr(samples))
	}
	return to.Sub(from), st, opErr
}

func bsMaxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// rowCompaction is row 4: 1% of the live keys updated three times on
// top of the load's own history, then a physical compaction at the
// current revision under the put load.
func (sb *bscaleBench) rowCompaction(side *bscaleSide) {
	t := sb.t
	bscaleLoad(t, side.label+" (garbage for the compaction)", []string{side.srv.ClientURL}, sb.plan, bscaleLoadChurn, 1)
	garbage := sb.plan.garbage()
	rev := sb.revision(side)
	took, st, err := sb.underPutLoad(side, "/bench/compact", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
		defer cancel()
		_, err := side.admin.Compact(ctx, rev, clientv3.WithCompactPhysical())
		return err
	})
	if err != nil {
		t.Fatalf("%s: compact at %d: %v", side.label, rev, err)
	}
	sb.putFailures(side, "/bench/compact", st)
	side.set("compact.time", took.Seconds())
	side.set("compact.garbage", float64(garbage))
	side.set("compact.max", st.max.Seconds())
	side.set("compact.p99", st.p99.Seconds())
	side.note["compact.max"] = fmt.Sprintf("%d puts", st.n)
	t.Logf("SCALE compaction %s: %d garbage revisions (1%% of keys × 3: %d) compacted at %d in %s; %d puts during it: p99 %s, max %s",
		side.label, garbage, sb.plan.churnKeys*len(bscaleChurnVersions), rev, bscaleDur(took.Seconds()), st.n, bscaleDur(st.p99.Seconds()), bscaleDur(st.max.Seconds()))
}

// putFailures reports puts of the fixed-rate load that failed: for
// Strata an error (a server that fails a put under 300 a second is
// wrong), for etcd a note in the table.
func (sb *bscaleBench) putFailures(side *bscaleSide, prefix string, st bsLatencyStats) {
	if st.failed == 0 {
		return
	}
	sb.t.Logf("SCALE %s: %s", side.label, side.note[prefix])
	if side == sb.sides[1] {
		sb.t.Errorf("%s: %s", side.label, side.note[prefix])
	}
}

// rowDefrag is row 5: Maintenance.Defragment under the put load, and the
// db file's size before and after it.
func (sb *bscaleBench) rowDefrag(side *bscaleSide) {
	t := sb.t
	status := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := side.admin.Status(ctx, side.srv.ClientURL)
		if err != nil {
			t.Fatalf("%s: status: %v", side.label, err)
		}
		return st.DbSize
	}
	before := status()
	took, st, err := sb.underPutLoad(side, "/bench/defrag", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
		defer cancel()
		_, err := side.admin.Defragment(ctx, side.srv.ClientURL)
		return err
	})
	if err != nil {
		t.Fatalf("%s: defragment: %v", side.label, err)
	}
	sb.putFailures(side, "/bench/defrag", st)
	after := status()
	side.set("defrag.time", took.Seconds())
	side.set("defrag.max", st.max.Seconds())
	side.set("defrag.p99", st.p99.Seconds())
	side.set("defrag.before", float64(before))
	side.set("defrag.after", float64(after))
	side.note["defrag.max"] = fmt.Sprintf("%d puts", st.n)
	t.Logf("SCALE defrag %s: %s in %s → %s; %d puts during it: p99 %s, max %s", side.label, bscaleDur(took.Seconds()), bscaleSize(before), bscaleSize(after),
		st.n, bscaleDur(st.p99.Seconds()), bscaleDur(st.max.Seconds()))
}

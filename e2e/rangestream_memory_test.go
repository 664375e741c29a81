package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/strata-db/strata/e2e/harness"
)

// The stream memory test's sizes: make test streams 256 MiB,
// make range-stream-memory (STRATA_STREAM_MEMORY=long) 1 GiB and runs
// the same stream against etcd 3.7.3 beside it.
const (
	streamValueSize = 128 << 10
	// streamHeapBound is the most the target's live heap may grow while
	// it streams: the three chunks a stream holds at most (3 × 2 ×
	// --max-request-bytes, 9 MiB at the default, see
	// server/rangestream.go) and 2 MiB for the gRPC connection's own
	// buffers.
	streamHeapBound = 3*2*1536*1024 + 2<<20
)

// TestRangeStreamMemory loads values of 128 KiB (random, so the page
// store cannot compress them) until the range holds 256 MiB (1 GiB in
// long mode), then reads it all with RangeStream through a client that
// reads slowly: a 64 KiB flow-control window and a pause after every
// message, so the server spends the stream blocked on the client. While
// it streams, the server's live heap (HeapInuse right after a collection,
// which /debug/pprof/heap?gc=1 forces, every 50 ms) must stay within
// streamHeapBound of what it was just before: what the stream holds does
// not grow with the result. The anonymous RSS is reported beside it (it
// also holds the garbage between collections, which a heap of hundreds
// of MiB of raft log lets grow for seconds). A control measures a unary
// range of 64 MiB the same way and must see it. Prints RANGESTREAM-MEMORY
// lines.
func TestRangeStreamMemory(t *testing.T) {
	b := needBins(t)
	total := 256 << 20
	long := os.Getenv("STRATA_STREAM_MEMORY") == "long"
	if long {
		total = 1 << 30
	}
	sides := []struct{ label, bin string }{{"target", targetBin(t, b)}}
	if long {
		sides = append(sides, struct{ label, bin string }{"etcd", b.Etcd})
	}
	for _, side := range sides {
		r := streamMemoryRun(t, side.bin, total)
		t.Logf("RANGESTREAM-MEMORY %s: %d MiB in %d values streamed in %d messages in %.1fs (%.0f MiB/s); live heap: before %.1f MiB, peak %.1f MiB (+%.1f MiB); anonymous RSS: before %.1f MiB, peak %.1f MiB (+%.1f MiB); %d samples",
			side.label, total>>20, r.values, r.messages, r.took.Seconds(), float64(total)/(1<<20)/r.took.Seconds(),
			mibOf(r.baseHeap), mibOf(r.peakHeap), mibOf(r.peakHeap-r.baseHeap), mibOf(r.baseAnon), mibOf(r.peakAnon), mibOf(r.peakAnon-r.baseAnon), r.samples)
		t.Logf("RANGESTREAM-MEMORY %s: control: a unary range of 64 MiB of the same values grew the live heap by %.1f MiB", side.label, mibOf(r.controlPeak-r.controlBase))
		if side.label != "target" {
			continue
		}
		if r.controlPeak-r.controlBase <= streamHeapBound {
			t.Errorf("the control's unary range of 64 MiB grew the live heap by only %.1f MiB: the sampling does not see what a read holds", mibOf(r.controlPeak-r.controlBase))
		}
		if r.peakHeap-r.baseHeap > streamHeapBound {
			t.Errorf("the live heap grew by %.1f MiB while streaming %d MiB, over the bound of %.1f MiB", mibOf(r.peakHeap-r.baseHeap), total>>20, mibOf(streamHeapBound))
		}
	}
}

func mibOf(n int64) float64 { return float64(n) / (1 << 20) }

type streamMemoryResult struct {
	values, messages   int
	took               time.Duration
	baseHeap, peakHeap int64
	baseAnon, peakAnon int64
	samples            int
	// The unary range's live heap before and at its peak.
	controlBase, controlPeak int64
}

func streamMemoryRun(t *testing.T, bin string, total int) streamMemoryResult {
	srv, err := harness.NewServer(harness.ServerConfig{Bin: bin, Dir: t.TempDir(), Flags: []string{"--enable-pprof", "--quota-backend-bytes=" + strconv.Itoa(4*total+(1<<30))}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(strings.TrimPrefix(srv.ClientURL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(128<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv := pb.NewKVClient(conn)

	// Load: 4 writers, txns of 8 values (1 MiB).
	values := total / streamValueSize
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for w := 0; w < 4; w++ {
		g.Go(func() error {
			for {
				first := int(next.Add(8)) - 8
				if first >= values {
					return nil
				}
				var ops []*pb.RequestOp
				for i := first; i < min(first+8, values); i++ {
					v := make([]byte, streamValueSize)
					rand.Read(v)
					ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(fmt.Sprintf("big/%08d", i)), Value: v}}})
				}
				if _, err := kv.Txn(gctx, &pb.TxnRequest{Success: ops}); err != nil {
					return err
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("%s: load: %v", bin, err)
	}

	// The baseline: the live heap once the load's last batches are
	// committed (the backend commits every 100 ms; two seconds is many
	// commits), taken just before the stream.
	time.Sleep(2 * time.Second)
	res := streamMemoryResult{values: values}
	res.baseHeap, res.baseAnon = liveHeap(t, srv.ClientURL), rssAnon(srv.Pid())

	start := time.Now()
	got := 0
	res.peakHeap, res.peakAnon, res.samples = whileSampling(t, srv, func() {
		rs, err := kv.RangeStream(ctx, &pb.RangeRequest{Key: []byte("big/"), RangeEnd: []byte("big0")})
		if err != nil {
			t.Fatal(err)
		}
		for {
			m, err := rs.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: stream: %v", bin, err)
			}
			res.messages++
			got += len(m.RangeResponse.Kvs)
			for _, kv := range m.RangeResponse.Kvs {
				if len(kv.Value) != streamValueSize {
					t.Fatalf("%s: %s has %d bytes", bin, kv.Key, len(kv.Value))
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	res.took = time.Since(start)
	if got != values {
		t.Fatalf("%s: the stream returned %d of %d values", bin, got, values)
	}

	// The control: the same measurement around a unary Range of 64 MiB
	// of the same values, read by the same slow client, must see it.
	res.controlBase = liveHeap(t, srv.ClientURL)
	res.controlPeak, _, _ = whileSampling(t, srv, func() {
		if _, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("big/"), RangeEnd: []byte("big0"), Limit: 512}); err != nil {
			t.Fatalf("%s: unary range: %v", bin, err)
		}
	})
	return res
}

// whileSampling runs f while sampling the server's live heap and
// anonymous RSS every 50 ms, and returns their peaks.
func whileSampling(t *testing.T, srv *harness.Server, f func()) (heap, anon int64, samples int) {
	type peaks struct {
		heap, anon int64
		n          int
	}
	stop := make(chan struct{})
	done := make(chan peaks)
	go func() {
		var p peaks
		for {
			p.heap, p.anon = max(p.heap, liveHeap(t, srv.ClientURL)), max(p.anon, rssAnon(srv.Pid()))
			p.n++
			select {
			case <-stop:
				done <- p
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	var p peaks
	func() {
		// f may end the test (t.Fatal): the sampler stops either way.
		defer func() {
			close(stop)
			p = <-done
		}()
		f()
	}()
	return p.heap, p.anon, p.n
}

// liveHeap is a server's heap in use right after a full collection: the
// HeapInuse of the runtime.MemStats that /debug/pprof/heap?debug=1
// prints, with gc=1 to collect first (--enable-pprof).
func liveHeap(t *testing.T, clientURL string) int64 {
	cl := &http.Client{Timeout: 30 * time.Second}
	resp, err := cl.Get(clientURL + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		t.Error(err)
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapInuse = "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Error(err)
			}
			return n
		}
	}
	t.Errorf("%s/debug/pprof/heap: no HeapInuse (%v)", clientURL, sc.Err())
	return 0
}

// rssAnon is a process's anonymous resident memory (RssAnon of
// /proc/PID/status): its heap and stacks, not the page store's mapped
// file.
func rssAnon(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "RssAnon:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

var bscaleNopLogger = zap.NewNop()

// bscaleMaxMsg is the clients' receive limit: gRPC's largest message,
// so an unpaginated list of a 10 GiB data set's 10% fits.
const bscaleMaxMsg = math.MaxInt32

// bscaleConn is a plain gRPC connection to one server for the reads
// that go through bsScanCodec. It reconnects within 20 ms of a server
// coming back (gRPC's default backoff waits up to seconds), which the
// restart row's polling relies on.
func bscaleConn(clientURL string) (*grpc.ClientConn, error) {
	return grpc.NewClient(strings.TrimPrefix(clientURL, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(bscaleMaxMsg)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.2, MaxDelay: 20 * time.Millisecond},
			MinConnectTimeout: 200 * time.Millisecond,
		}))
}

// bsScanKV is one KeyValue of a scanned response; its slices are valid
// only during the callback.
type bsScanKV struct {
	key, value     []byte
	version, lease int64
}

// bsRangeScan is what bsScanCodec decodes a RangeResponse (or, with
// stream, a RangeStreamResponse) into: its size on the wire, its kvs'
// count and the last key, the count and more fields, and each kv
// through onKV. It keeps no kv, so a response of a gigabyte costs the
// client the gRPC buffers it arrived in and nothing more: the lists
// measure the server, not the test's protobuf decoding.
type bsRangeScan struct {
	stream  bool
	onKV    func(bsScanKV)
	bytes   int64
	kvs     int
	count   int64
	more    bool
	lastKey []byte
	buf     []byte
}

func (s *bsRangeScan) reset() {
	s.bytes, s.kvs, s.count, s.more = 0, 0, 0, false
	s.lastKey = s.lastKey[:0]
}

// bsScanCodec marshals requests with protobuf and scans responses into a
// *bsRangeScan.
type bsScanCodec struct{}

func (bsScanCodec) Name() string { return "proto" }

func (bsScanCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("bsScanCodec: cannot marshal %T", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (bsScanCodec) Unmarshal(data mem.BufferSlice, v any) error {
	s, ok := v.(*bsRangeScan)
	if !ok {
		return fmt.Errorf("bsScanCodec: cannot unmarshal into %T", v)
	}
	r := data.Reader()
	defer r.Close()
	n := int64(data.Len())
	s.bytes += n
	if !s.stream {
		return s.scanResponse(r, n)
	}
	// RangeStreamResponse: field 1 is a RangeResponse.
	for n > 0 {
		num, typ, l, err := bsReadField(r, &n)
		if err != nil {
			return err
		}
		if num == 1 && typ == protowire.BytesType {
			if err := s.scanResponse(r, int64(l)); err != nil {
				return err
			}
			continue
		}
		if err := bsSkipField(r, typ, l); err != nil {
			return err
		}
	}
	return nil
}

type bsByteReader interface {
	io.Reader
	io.ByteReader
}

func bsReadUvarint(r io.ByteReader, n *int64) (uint64, error) {
	var x uint64
	for shift := uint(0); shift < 64; shift += 7 {
		b, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		*n--
		x |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return x, nil
		}
	}
	return 0, errors.New("bsScanCodec: varint overflow")
}

// bsReadField reads a field's tag and, for a varint field, its value, or,
// for a bytes field, its length (which it counts off n too, the caller
// reading the bytes).
func bsReadField(r bsByteReader, n *int64) (protowire.Number, protowire.Type, uint64, error) {
	tag, err := bsReadUvarint(r, n)
	if err != nil {
		return 0, 0, 0, err
	}
	num, typ := protowire.Number(tag>>3), protowire.Type(tag&7)
	switch typ {
	case protowire.VarintType:
		v, err := bsReadUvarint(r, n)
		return num, typ, v, err
	case protowire.BytesType:
		l, err := bsReadUvarint(r, n)
		*n -= int64(l)
		return num, typ, l, err
	case protowire.Fixed32Type:
		*n -= 4
		return num, typ, 4, nil
	case protowire.Fixed64Type:
		*n -= 8
		return num, typ, 8, nil
	}
	return 0, 0, 0, fmt.Errorf("bsScanCodec: wire type %d", typ)
}

func bsSkipField(r io.Reader, typ protowire.Type, l uint64) error {
	if typ == protowire.VarintType {
		return nil
	}
	_, err := io.CopyN(io.Discard, r, int64(l))
	return err
}

// scanResponse scans the n bytes of a RangeResponse.
func (s *bsRangeScan) scanResponse(r bsByteReader, n int64) error {
	for n > 0 {
		num, typ, l, err := bsReadField(r, &n)
		if err != nil {
			return err
		}
		switch {
		case num == 2 && typ == protowire.BytesType:
			if cap(s.buf) < int(l) {
				s.buf = make([]byte, l)
			}
			b := s.buf[:l]
			if _, err := io.ReadFull(r, b); err != nil {
				return err
			}
			kv, err := bsParseKV(b)
			if err != nil {
				return err
			}
			s.kvs++
			s.lastKey = append(s.lastKey[:0], kv.key...)
			if s.onKV != nil {
				s.onKV(kv)
			}
		case num == 3 && typ == protowire.VarintType:
			s.more = l != 0
		case num == 4 && typ == protowire.VarintType:
			s.count = int64(l)
		default:
			if err := bsSkipField(r, typ, l); err != nil {
				return err
			}
		}
	}
	if n < 0 {
		return errors.New("bsScanCodec: a field runs past its message")
	}
	return nil
}

// bsParseKV reads mvccpb.KeyValue's key (1), version (4), value (5) and
// lease (6).
func bsParseKV(b []byte) (bsScanKV, error) {
	var kv bsScanKV
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return kv, protowire.ParseError(n)
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return kv, protowire.ParseError(n)
			}
			switch num {
			case 1:
				kv.key = v
			case 5:
				kv.value = v
			}
			b = b[n:]
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return kv, protowire.ParseError(n)
			}
			switch num {
			case 4:
				kv.version = int64(v)
			case 6:
				kv.lease = int64(v)
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return kv, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return kv, nil
}

// bsScanRange sends one unary Range and scans its response into sc.
func bsScanRange(ctx context.Context, conn *grpc.ClientConn, req *pb.RangeRequest, sc *bsRangeScan) error {
	sc.reset()
	sc.stream = false
	return conn.Invoke(ctx, "/etcdserverpb.KV/Range", req, sc, grpc.ForceCodecV2(bsScanCodec{}))
}

// bsScanRangeStream reads a whole RangeStream into sc (its figures summed
// over the messages) and returns the number of messages.
func bsScanRangeStream(ctx context.Context, conn *grpc.ClientConn, req *pb.RangeRequest, sc *bsRangeScan) (int, error) {
	sc.reset()
	sc.stream = true
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/etcdserverpb.KV/RangeStream", grpc.ForceCodecV2(bsScanCodec{}))
	if err != nil {
		return 0, err
	}
	if err := st.SendMsg(req); err != nil {
		return 0, err
	}
	if err := st.CloseSend(); err != nil {
		return 0, err
	}
	msgs := 0
	for {
		// count is set on the last message only; keep the sum of kvs.
		err := st.RecvMsg(sc)
		if errors.Is(err, io.EOF) {
			return msgs, nil
		}
		if err != nil {
			return msgs, err
		}
		msgs++
	}
}

// bsGcServer makes a server collect its garbage (the heap profile with
// gc=1, which --enable-pprof serves), so a memory baseline holds what
// it keeps and not what it has yet to collect.
func bsGcServer(clientURL string) error {
	cl := &http.Client{Timeout: 2 * time.Minute}
	resp, err := cl.Get(clientURL + "/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s/debug/pprof/heap: %s", clientURL, resp.Status)
	}
	return err
}

// bsSettledRSS collects the server's garbage, then waits until its
// anonymous RSS has stopped falling (the runtime gives freed pages back
// over a few seconds): no fall of more than 1 MiB in a second, or a
// minute at most. It returns that RSS.
func bsSettledRSS(srv interface {
	Pid() int
}, clientURL string) (int64, error) {
	if err := bsGcServer(clientURL); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(time.Minute)
	low := rssAnon(srv.Pid())
	lowAt := time.Now()
	for time.Now().Before(deadline) && time.Since(lowAt) < time.Second {
		time.Sleep(100 * time.Millisecond)
		if v := rssAnon(srv.Pid()); v < low-(1<<20) {
			low, lowAt = v, time.Now()
		}
	}
	v := rssAnon(srv.Pid())
	if v == 0 {
		return 0, fmt.Errorf("no RssAnon for pid %d", srv.Pid())
	}
	return v, nil
}

// bsPeakRSS runs f while sampling pid's anonymous RSS every 20 ms and
// returns the highest sample.
func bsPeakRSS(pid int, f func()) int64 {
	var peak atomic.Int64
	peak.Store(rssAnon(pid))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if v := rssAnon(pid); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	func() {
		defer func() { close(stop); <-done }()
		f()
	}()
	if v := rssAnon(pid); v > peak.Load() {
		peak.Store(v)
	}
	return peak.Load()
}

// bsDirUsage is a directory's apparent size (the files' lengths) and
// what it takes on the disk (allocated blocks), as du and du -b count
// them.
func bsDirUsage(dir string) (apparent, allocated int64, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			apparent += st.Size
		}
		allocated += st.Blocks * 512
		return nil
	})
	return apparent, allocated, err
}

// bsColdCache drops dir's pages from the page cache: sync, then
// posix_fadvise(POSIX_FADV_DONTNEED) on every file, then, where it is
// writable (root), echo 1 > /proc/sys/vm/drop_caches. It returns how it
// did it, for the table's header.
func bsColdCache(dir string) (string, error) {
	unix.Sync()
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		files++
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
	if err != nil {
		return "", fmt.Errorf("fadvise on %s: %w", dir, err)
	}
	how := "sync, then posix_fadvise(POSIX_FADV_DONTNEED) on every file of the data dir"
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1\n"), 0); err != nil {
		how += fmt.Sprintf(" (drop_caches not writable: %v)", err)
	} else {
		how += " and echo 1 > /proc/sys/vm/drop_caches"
	}
	return how, nil
}

// bscaleMachine describes the machine and the data dir's file system.
func bscaleMachine(dir string) string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	ram := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				var kb int64
				fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
				ram = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	var u unix.Utsname
	kernel := "?"
	if unix.Uname(&u) == nil {
		kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
	}
	return fmt.Sprintf("%s, %d cores, %s RAM, %s; data dirs in %s: %s", cpu, runtime.NumCPU(), ram, kernel, dir, bsMountOf(dir))
}

// bsMountOf names the file system dir is on: type, device, mount point
// and, for a block device, whether it is rotational.
func bsMountOf(dir string) string {
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "?"
	}
	want := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "device " + want
	}
	defer f.Close()
	best, desc := "", ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) || fields[2] != want {
			continue
		}
		mnt := fields[4]
		if !strings.HasPrefix(dir, mnt) || len(mnt) < len(best) {
			continue
		}
		best = mnt
		desc = fmt.Sprintf("%s on %s (mounted on %s)", fields[sep+1], fields[sep+2], mnt)
	}
	if desc == "" {
		return "device " + want
	}
	if b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%s/queue/rotational", want)); err == nil {
		if strings.TrimSpace(string(b)) == "0" {
			desc += ", non-rotational"
		} else {
			desc += ", rotational"
		}
	}
	return desc
}

// bsGitCommit is the checkout's commit, marked when files differ from it.
func bsGitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}

// bsPutSample is one put of a fixed-rate load.
type bsPutSample struct {
	start time.Time
	lat   time.Duration
	err   error
}

// bsPutLoad writes values of size bytes at rate puts a second from a
// client of its own, each put in a goroutine of its own (an open loop:
// a server that stalls shows as latency, not as a slower load), put n
// to key(n). Values are Kubernetes objects from the data set's
// generator; with stamp, each starts with the time the put was sent
// (16 hex digits of Unix nanoseconds), for the watchers to read.
type bsPutLoad struct {
	mu      sync.Mutex
	samples []bsPutSample
	stop    chan struct{}
	wg      sync.WaitGroup
	cli     *clientv3.Client
}

func bsStartPutLoad(endpoints []string, rate, size int, seed uint64, key func(int) string, stamp bool) (*bsPutLoad, error) {
	cli, err := bscaleClient(endpoints)
	if err != nil {
		return nil, err
	}
	l := &bsPutLoad{stop: make(chan struct{}), cli: cli}
	r := rand.New(rand.NewPCG(seed, 0x707574))
	k := bscaleKey{i: 0, res: &bscaleResources[0], key: "/registry/pods/team-000/put-load"}
	var values []string
	for i := 0; i < 64; i++ {
		values = append(values, string(bscaleObject(nil, r, k, i, size)))
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
				defer cancel()
				v := values[n%len(values)]
				s := bsPutSample{start: time.Now()}
				if stamp {
					b := []byte(v)
					copy(b, fmt.Sprintf("%016x", s.start.UnixNano()))
					v = string(b)
				}
				_, s.err = cli.Put(ctx, key(n), v)
				s.lat = time.Since(s.start)
				l.mu.Lock()
				l.samples = append(l.samples, s)
				l.mu.Unlock()
			}()
		}
	}()
	return l, nil
}

// bsStampOf is the send time a stamped value starts with.
func bsStampOf(v []byte) (time.Time, bool) {
	if len(v) < 16 {
		return time.Time{}, false
	}
	var ns int64
	for _, c := range v[:16] {
		d := strings.IndexByte(bsHexDigits, c)
		if d < 0 {
			return time.Time{}, false
		}
		ns = ns<<4 | int64(d)
	}
	return time.Unix(0, ns), true
}

// count is the number of puts done so far.
func (l *bsPutLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.samples)
}

// finish stops the load, waits for the puts in flight and returns every
// put's sample.
func (l *bsPutLoad) finish() []bsPutSample {
	close(l.stop)
	l.wg.Wait()
	l.cli.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.samples
}

// bsLatencyStats are the puts that overlapped [from, to]: how many, how
// many failed, and their latencies' p99 and max.
type bsLatencyStats struct {
	n, failed int
	p99, max  time.Duration
}

func bsWindowStats(samples []bsPutSample, from, to time.Time) bsLatencyStats {
	var lats []time.Duration
	var st bsLatencyStats
	for _, s := range samples {
		if s.start.After(to) || s.start.Add(s.lat).Before(from) {
			continue
		}
		st.n++
		if s.err != nil {
			st.failed++
			continue
		}
		lats = append(lats, s.lat)
	}
	if len(lats) == 0 {
		return st
	}
	slices.Sort(lats)
	st.max = lats[len(lats)-1]
	st.p99 = lats[min(len(lats)-1, int(math.Ceil(0.99*float64(len(lats))))-1)]
	return st
}

// bsFirstErr is the first failed put's error, for a message.
func bsFirstErr(samples []bsPutSample) error {
	for _, s := range samples {
		if s.err != nil {
			return s.err
		}
	}
	return nil
}

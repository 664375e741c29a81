package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// The bench-scale data set: Kubernetes objects under
// /registry/<resource>/<namespace>/<name>, made from a seed so both
// servers get the same one. Nothing of it is stored: a key's resource,
// namespace, name, history and value sizes are drawn again from the
// seed and the key's index whenever they are needed, which is what
// lets the plan of a 10 GiB data set fit in a few bytes.

// bscaleResource is one kind of object: its share of the keys and the
// sizes its values take.
type bscaleResource struct {
	name, kind, apiVersion string
	// weight is the resource's share of the objects, in percent.
	weight int
	// sizes picks a value size.
	sizes func(r *rand.Rand) int
	// leased objects are put with one of the plan's leases (events:
	// the API server gives each a TTL).
	leased bool
}

// bsSizeMix is most objects' size: most of 1-4 KiB, some of 8-16 KiB.
func bsSizeMix(r *rand.Rand) int {
	switch p := r.IntN(100); {
	case p < 45:
		return 1024 + r.IntN(1024)
	case p < 75:
		return 2048 + r.IntN(2048)
	case p < 90:
		return 4096 + r.IntN(4096)
	default:
		return 8192 + r.IntN(8193)
	}
}

func bsSizeSmall(r *rand.Rand) int { return 1024 + r.IntN(1024) }
func bsSizeMid(r *rand.Rand) int   { return 1024 + r.IntN(3072) }

var bscaleResources = []bscaleResource{
	{"pods", "Pod", "v1", 30, bsSizeMix, false},
	{"events", "Event", "v1", 20, bsSizeSmall, true},
	{"configmaps", "ConfigMap", "v1", 10, bsSizeMix, false},
	{"secrets", "Secret", "v1", 10, bsSizeMix, false},
	{"replicasets", "ReplicaSet", "apps/v1", 10, bsSizeMix, false},
	{"deployments", "Deployment", "apps/v1", 5, bsSizeMix, false},
	{"services", "Service", "v1", 5, bsSizeMid, false},
	{"leases", "Lease", "coordination.k8s.io/v1", 5, bsSizeSmall, false},
	{"endpointslices", "EndpointSlice", "discovery.k8s.io/v1", 5, bsSizeMid, false},
}

// bscaleListResource is the resource the list rows (6 and 9) read: it
// holds about 10% of the objects.
const bscaleListResource = "configmaps"

const (
	bscaleNamespaces = 500
	bscaleLeases     = 16
	// bscaleLeaseTTL outlives any run: the events must stay.
	bscaleLeaseTTL = 7 * 24 * 3600
	// bscaleLeaseBase is the first lease's ID; the IDs are fixed so both
	// servers hold the same leases and the content check covers them.
	bscaleLeaseBase = 0x5ca1e0000
	// bscaleLoadClients is the number of clients the load runs on.
	bscaleLoadClients = 64
	// bscaleClusterBatch is the most writes a transaction of the
	// cluster row's load holds.
	bscaleClusterBatch = 32
)

// bscaleKey is what the seed says about one object.
type bscaleKey struct {
	i   int
	res *bscaleResource
	key string
	// updates is how many times the load writes it again after the
	// create; deleted says the load deletes it last.
	updates int
	deleted bool
	// churn marks the 1% of live keys the compaction row updates three
	// times to make garbage.
	churn bool
	lease int64
}

// bscalePlan is the data set of one size.
type bscalePlan struct {
	seed uint64
	mb   int
	// keys objects are created, key indexes 0..keys-1.
	keys int
	// createBytes is what the creates write (keys and values): the
	// data set's size.
	createBytes                int64
	creates, updates, deletes  int
	liveKeys                   int
	liveBytes                  int64
	events                     int
	churnKeys                  int
	live                       map[string]int // live keys per resource
	liveListBytes              int64          // live bytes under bscaleListResource
	updateBytes, valueBytesAll int64
}

func (p *bscalePlan) writes() int { return p.creates + p.updates + p.deletes }

// rng is the random source of one key (ver < 0) or of one version of
// its value.
func (p *bscalePlan) rng(i, ver int) *rand.Rand {
	return rand.New(rand.NewPCG(p.seed^0x9e3779b97f4a7c15, uint64(i)<<8|uint64(ver+1)))
}

// key draws key i's identity and history.
func (p *bscalePlan) key(i int) bscaleKey {
	r := p.rng(i, -1)
	k := bscaleKey{i: i}
	w := r.IntN(100)
	for j := range bscaleResources {
		if w < bscaleResources[j].weight {
			k.res = &bscaleResources[j]
			break
		}
		w -= bscaleResources[j].weight
	}
	ns := r.IntN(bscaleNamespaces)
	// The name's suffix is i times an odd constant modulo 2^40 (a
	// bijection, so names never collide) plus a seeded offset: keys
	// are created in an order unrelated to their sort order, as a
	// cluster creates them.
	suffix := (uint64(i)*0x9E3779B97F + p.seed) & (1<<40 - 1)
	k.key = fmt.Sprintf("/registry/%s/team-%03d/%s-%010x", k.res.name, ns, k.res.name[:3], suffix)
	switch u := r.IntN(100); {
	case u < 20:
		k.updates = 1
	case u < 25:
		k.updates = 2
	}
	k.deleted = r.IntN(100) < 5
	k.churn = !k.deleted && r.IntN(100) < 1
	if k.res.leased {
		k.lease = bscaleLeaseBase + int64(i%bscaleLeases)
	}
	return k
}

// size is the size of version ver of key k's value (0 is the create;
// the compaction row's updates are versions 8, 9 and 10).
func (p *bscalePlan) size(k bscaleKey, ver int) int {
	return k.res.sizes(p.rng(k.i, ver))
}

// value is version ver of key k's value, appended to dst.
func (p *bscalePlan) value(dst []byte, k bscaleKey, ver int) []byte {
	r := p.rng(k.i, ver)
	n := k.res.sizes(r)
	return bscaleObject(dst, r, k, ver, n)
}

// newBscalePlan draws keys until their creates hold mb MiB, and counts
// what the load will do.
func newBscalePlan(seed uint64, mb int) *bscalePlan {
	p := &bscalePlan{seed: seed, mb: mb, live: map[string]int{}}
	target := int64(mb) << 20
	for i := 0; p.createBytes < target; i++ {
		k := p.key(i)
		sz := int64(p.size(k, 0))
		p.keys++
		p.creates++
		p.createBytes += int64(len(k.key)) + sz
		p.valueBytesAll += sz
		last := sz
		for v := 1; v <= k.updates; v++ {
			last = int64(p.size(k, v))
			p.updateBytes += last
		}
		p.updates += k.updates
		if k.res.leased {
			p.events++
		}
		if k.deleted {
			p.deletes++
			continue
		}
		p.liveKeys++
		p.liveBytes += int64(len(k.key)) + last
		p.live[k.res.name]++
		if k.res.name == bscaleListResource {
			p.liveListBytes += int64(len(k.key)) + last
		}
		if k.churn {
			p.churnKeys++
		}
	}
	return p
}

// lastVersion is the version of k's value the load leaves.
func (k bscaleKey) lastVersion() int { return k.updates }

// bscaleObject appends a Kubernetes object of exactly n bytes: JSON as
// the API server writes it, with what differs from object to object in
// a cluster random (uids, hashes, digests, IPs, tokens, secret data),
// so it compresses about as real objects do (TestBenchScaleValues
// checks the ratio).
func bscaleObject(dst []byte, r *rand.Rand, k bscaleKey, ver, n int) []byte {
	start := len(dst)
	d := dst
	d = append(d, `{"kind":"`...)
	d = append(d, k.res.kind...)
	d = append(d, `","apiVersion":"`...)
	d = append(d, k.res.apiVersion...)
	d = append(d, `","metadata":{"name":"`...)
	d = append(d, k.key[len("/registry/")+len(k.res.name)+1+len("team-000")+1:]...)
	d = append(d, `","namespace":"`...)
	d = append(d, k.key[len("/registry/")+len(k.res.name)+1:][:len("team-000")]...)
	d = append(d, `","uid":"`...)
	d = bsAppendUID(d, r)
	d = append(d, `","resourceVersion":"`...)
	d = strconv.AppendInt(d, int64(100000+k.i*11+ver), 10)
	d = append(d, `","generation":`...)
	d = strconv.AppendInt(d, int64(ver+1), 10)
	d = append(d, `,"creationTimestamp":"2026-11-`...)
	d = bsAppendTwo(d, 1+r.IntN(28))
	d = append(d, 'T')
	d = bsAppendTwo(d, r.IntN(24))
	d = append(d, ':')
	d = bsAppendTwo(d, r.IntN(60))
	d = append(d, ':')
	d = bsAppendTwo(d, r.IntN(60))
	d = append(d, `Z","labels":{"app":"app-`...)
	d = strconv.AppendInt(d, int64(k.i%97), 10)
	d = append(d, `","pod-template-hash":"`...)
	d = bsAppendHex(d, r, 10)
	d = append(d, `","tier":"backend"},"managedFields":[{"manager":"kube-controller-manager","operation":"Update","apiVersion":"`...)
	d = append(d, k.res.apiVersion...)
	d = append(d, `","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{}}}}}]},`...)
	var open, closing string
	switch k.res.name {
	case "secrets":
		open, closing = `"type":"Opaque","data":{`, `}`
	case "configmaps":
		open, closing = `"data":{`, `}`
	case "events":
		open, closing = `"involvedObject":{"kind":"Pod","namespace":"team-1","name":"web"},"reason":"Scheduled","series":[`, `]`
	default:
		open, closing = `"spec":{"containers":[`, `]}`
	}
	d = append(d, open...)
	const tail = `,"nonce":""}`
	var item [640]byte
	for it := 0; ; it++ {
		x := bscaleItem(item[:0], r, k, it)
		if len(d)-start+len(x)+len(closing)+len(tail) > n {
			break
		}
		d = append(d, x...)
	}
	if d[len(d)-1] == ',' {
		d = d[:len(d)-1]
	}
	d = append(d, closing...)
	d = append(d, `,"nonce":"`...)
	// What is left of n is a nonce (it may be empty), as random as the
	// rest; an object whose header alone is longer than n is cut to n.
	d = bsAppendPad(d, r, max(0, n-(len(d)-start)-2))
	d = append(d, `"}`...)
	return d[:start+n]
}

// bscaleItem is one entry of an object's body: a container, a secret's
// key, a config file or an event occurrence, with a trailing comma.
func bscaleItem(d []byte, r *rand.Rand, k bscaleKey, it int) []byte {
	switch k.res.name {
	case "secrets":
		d = append(d, `"key-`...)
		d = strconv.AppendInt(d, int64(it), 10)
		d = append(d, `":"`...)
		d = bsAppendB64(d, r, 48)
		d = append(d, `",`...)
	case "configmaps":
		d = append(d, `"config-`...)
		d = strconv.AppendInt(d, int64(it), 10)
		d = append(d, `.yaml":"server:\n  port: 8080\n  logLevel: info\n  upstream: http://svc-`...)
		d = strconv.AppendInt(d, int64(r.IntN(1000)), 10)
		d = append(d, `.team.svc.cluster.local:8080\n  requestId: `...)
		d = bsAppendUID(d, r)
		d = append(d, `\n  checksum: `...)
		d = bsAppendHex(d, r, 40)
		d = append(d, `\n",`...)
	case "events":
		d = append(d, `{"count":`...)
		d = strconv.AppendInt(d, int64(it+1), 10)
		d = append(d, `,"lastObservedTime":"2026-11-01T00:00:`...)
		d = bsAppendTwo(d, r.IntN(60))
		d = append(d, `.`...)
		d = bsAppendHex(d, r, 6)
		d = append(d, `Z","message":"Successfully assigned team/web-`...)
		d = bsAppendHex(d, r, 10)
		d = append(d, ` to node-`...)
		d = strconv.AppendInt(d, int64(r.IntN(500)), 10)
		d = append(d, `","uid":"`...)
		d = bsAppendUID(d, r)
		d = append(d, `"},`...)
	default:
		d = append(d, `{"name":"c`...)
		d = strconv.AppendInt(d, int64(it), 10)
		d = append(d, `","image":"registry.example.com/app-`...)
		d = strconv.AppendInt(d, int64(r.IntN(100)), 10)
		d = append(d, `@sha256:`...)
		d = bsAppendHex(d, r, 64)
		d = append(d, `","env":[{"name":"POD_IP","value":"10.`...)
		d = strconv.AppendInt(d, int64(r.IntN(256)), 10)
		d = append(d, '.')
		d = strconv.AppendInt(d, int64(r.IntN(256)), 10)
		d = append(d, '.')
		d = strconv.AppendInt(d, int64(r.IntN(256)), 10)
		d = append(d, `"},{"name":"REQUEST_ID","value":"`...)
		d = bsAppendUID(d, r)
		d = append(d, `"}],"resources":{"requests":{"cpu":"100m","memory":"128Mi"}},"terminationMessagePath":"/dev/termination-log","imagePullPolicy":"IfNotPresent"},`...)
	}
	return d
}

const bsHexDigits = "0123456789abcdef"

func bsAppendHex(d []byte, r *rand.Rand, n int) []byte {
	for n > 0 {
		x := r.Uint64()
		for j := 0; j < 16 && n > 0; j++ {
			d = append(d, bsHexDigits[x&15])
			x >>= 4
			n--
		}
	}
	return d
}

// bsAppendPad appends n bytes, a third of them random hex.
func bsAppendPad(d []byte, r *rand.Rand, n int) []byte {
	const fill = ".node-pool-a.svc"
	for n > 0 {
		k := min(n, 8)
		d = bsAppendHex(d, r, k)
		n -= k
		k = min(n, len(fill))
		d = append(d, fill[:k]...)
		n -= k
	}
	return d
}

const bsB64Digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

func bsAppendB64(d []byte, r *rand.Rand, n int) []byte {
	for n > 0 {
		x := r.Uint64()
		for j := 0; j < 10 && n > 0; j++ {
			d = append(d, bsB64Digits[x&63])
			x >>= 6
			n--
		}
	}
	return d
}

func bsAppendUID(d []byte, r *rand.Rand) []byte {
	d = bsAppendHex(d, r, 8)
	d = append(d, '-')
	d = bsAppendHex(d, r, 4)
	d = append(d, '-')
	d = bsAppendHex(d, r, 4)
	d = append(d, '-')
	d = bsAppendHex(d, r, 4)
	d = append(d, '-')
	return bsAppendHex(d, r, 12)
}

func bsAppendTwo(d []byte, v int) []byte {
	return append(d, byte('0'+v/10), byte('0'+v%10))
}

// bscaleLoadKind is what a load writes: the data set (creates, then
// updates, then deletes), or the compaction row's garbage (each churn
// key updated three times).
type bscaleLoadKind int

const (
	bscaleLoadDataSet bscaleLoadKind = iota
	bscaleLoadChurn
)

// bscaleChurnVersions are the versions the compaction row writes.
var bscaleChurnVersions = []int{8, 9, 10}

type bscaleLoadResult struct {
	writes int
	bytes  int64
	took   time.Duration
}

func (r bscaleLoadResult) rate() float64 { return float64(r.writes) / r.took.Seconds() }

// bscaleLoad applies the plan through endpoints with bscaleLoadClients
// clients, each a clientv3 client of its own. Client w writes the keys
// whose index is w modulo the client count, each key's writes in
// order, so the content the load leaves does not depend on how the
// clients interleave (the revisions do). A failed write fails the
// load: it is not retried, as a retried put would bump a version twice.
//
// batch > 1 sends each client's writes in transactions of up to batch
// of them (a key at most once in each): the cluster row's load, where
// one write per request through three members on the same disk would
// take hours at 10 GiB. The content is the same; the revisions are
// fewer.
func bscaleLoad(t *testing.T, label string, endpoints []string, p *bscalePlan, kind bscaleLoadKind, batch int) bscaleLoadResult {
	t.Helper()
	total := p.writes()
	if kind == bscaleLoadChurn {
		total = p.churnKeys * len(bscaleChurnVersions)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clis := make([]*clientv3.Client, bscaleLoadClients)
	for w := range clis {
		cli, err := bscaleClient(endpoints)
		if err != nil {
			t.Fatalf("%s: load client %d: %v", label, w, err)
		}
		clis[w] = cli
		defer cli.Close()
	}
	if kind == bscaleLoadDataSet {
		for l := 0; l < bscaleLeases; l++ {
			lctx, lcancel := context.WithTimeout(ctx, time.Minute)
			_, err := pb.NewLeaseClient(clis[0].ActiveConnection()).LeaseGrant(lctx, &pb.LeaseGrantRequest{ID: bscaleLeaseBase + int64(l), TTL: bscaleLeaseTTL})
			lcancel()
			if err != nil {
				t.Fatalf("%s: grant lease %x: %v", label, bscaleLeaseBase+int64(l), err)
			}
		}
	}
	var done atomic.Int64
	var bytes atomic.Int64
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	start := time.Now()
	stopProgress := bscaleProgress(t, label, start, total, &done, &bytes)
	var wg sync.WaitGroup
	for w := 0; w < bscaleLoadClients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wr := &bscaleWriter{ctx: ctx, cli: clis[w], batch: batch, keys: map[string]bool{}, done: &done, bytes: &bytes}
			put := func(k bscaleKey, ver int) bool {
				if err := wr.put(k.key, string(p.value(nil, k, ver)), k.lease); err != nil {
					fail(fmt.Errorf("put %s (version %d): %w", k.key, ver, err))
					return false
				}
				return true
			}
			defer func() {
				if err := wr.flush(); err != nil {
					fail(err)
				}
			}()
			if kind == bscaleLoadChurn {
				for _, ver := range bscaleChurnVersions {
					for i := w; i < p.keys; i += bscaleLoadClients {
						if k := p.key(i); k.churn && !put(k, ver) {
							return
						}
					}
				}
				return
			}
			for i := w; i < p.keys; i += bscaleLoadClients {
				if !put(p.key(i), 0) {
					return
				}
			}
			for i := w; i < p.keys; i += bscaleLoadClients {
				k := p.key(i)
				for v := 1; v <= k.updates; v++ {
					if !put(k, v) {
						return
					}
				}
			}
			for i := w; i < p.keys; i += bscaleLoadClients {
				if k := p.key(i); k.deleted {
					if err := wr.del(k.key); err != nil {
						fail(fmt.Errorf("delete %s: %w", k.key, err))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	stopProgress()
	if firstErr != nil {
		t.Fatalf("%s: load failed after %d of %d writes: %v", label, done.Load(), total, firstErr)
	}
	res := bscaleLoadResult{writes: int(done.Load()), bytes: bytes.Load(), took: time.Since(start)}
	if res.writes != total {
		t.Fatalf("%s: the load made %d writes, the plan %d", label, res.writes, total)
	}
	how := "one a request"
	if batch > 1 {
		how = fmt.Sprintf("in transactions of up to %d", batch)
	}
	t.Logf("SCALE load %s: %d writes (%s, %s) in %.1fs: %.0f writes/s", label, res.writes, bscaleSize(res.bytes), how, res.took.Seconds(), res.rate())
	return res
}

// bscaleWriter is one load client's writes: sent one at a time, or
// gathered into transactions of up to batch.
type bscaleWriter struct {
	ctx         context.Context
	cli         *clientv3.Client
	batch       int
	ops         []clientv3.Op
	keys        map[string]bool
	n           int64 // bytes of the pending ops
	done, bytes *atomic.Int64
}

func (w *bscaleWriter) put(key, val string, lease int64) error {
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(clientv3.LeaseID(lease)))
	}
	return w.add(key, clientv3.OpPut(key, val, opts...), int64(len(key)+len(val)))
}

func (w *bscaleWriter) del(key string) error {
	return w.add(key, clientv3.OpDelete(key), 0)
}

func (w *bscaleWriter) add(key string, op clientv3.Op, n int64) error {
	if w.keys[key] {
		if err := w.flush(); err != nil {
			return err
		}
	}
	w.ops = append(w.ops, op)
	w.keys[key] = true
	w.n += n
	if len(w.ops) >= w.batch {
		return w.flush()
	}
	return nil
}

// flush sends the pending writes: one Put or Delete alone, more in a
// transaction. A delete must remove its key.
func (w *bscaleWriter) flush() error {
	if len(w.ops) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Minute)
	defer cancel()
	var deleted []int64
	if len(w.ops) == 1 {
		resp, err := w.cli.Do(ctx, w.ops[0])
		if err != nil {
			return err
		}
		if d := resp.Del(); d != nil {
			deleted = append(deleted, d.Deleted)
		}
	} else {
		resp, err := w.cli.Txn(ctx).Then(w.ops...).Commit()
		if err != nil {
			return fmt.Errorf("a transaction of %d writes: %w", len(w.ops), err)
		}
		for _, r := range resp.Responses {
			if d := r.GetResponseDeleteRange(); d != nil {
				deleted = append(deleted, d.Deleted)
			}
		}
	}
	for _, d := range deleted {
		if d != 1 {
			return fmt.Errorf("a delete removed %d keys, want 1", d)
		}
	}
	w.done.Add(int64(len(w.ops)))
	w.bytes.Add(w.n)
	w.ops, w.n = w.ops[:0], 0
	clear(w.keys)
	return nil
}

// bscaleProgress logs a load's progress every 10 s until stopped.
func bscaleProgress(t *testing.T, label string, start time.Time, total int, done, bytes *atomic.Int64) func() {
	stop := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			n := done.Load()
			el := time.Since(start)
			rate := float64(n) / el.Seconds()
			eta := "?"
			if rate > 0 {
				eta = (time.Duration(float64(int64(total)-n)/rate) * time.Second).Round(time.Second).String()
			}
			t.Logf("SCALE load %s: %d/%d writes (%.1f%%), %.0f MiB, %.0f writes/s, %s elapsed, ETA %s",
				label, n, total, 100*float64(n)/float64(total), mibOf(bytes.Load()), rate, el.Round(time.Second), eta)
		}
	}()
	return func() { close(stop); <-ended }
}

// bscaleClient is a clientv3 client for the bench.
func bscaleClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second, Logger: bscaleNopLogger,
		MaxCallRecvMsgSize: bscaleMaxMsg})
}

// bscaleDigest reads every key of the data set's prefixes
// (/registry/<resource>/<namespace>/) at revision rev, 1,000 a page,
// and returns a sha256 over each key, value, version and lease, and the
// number of keys (which the callers check against the plan's, so a key
// outside those prefixes shows). Revisions are left out: 64 clients order the
// load's writes differently on each server.
func bscaleDigest(conn *grpc.ClientConn, rev int64) ([32]byte, int, error) {
	h := sha256.New()
	var n int
	var lenBuf [binary.MaxVarintLen64]byte
	sc := &bsRangeScan{onKV: func(kv bsScanKV) {
		n++
		for _, b := range [][]byte{kv.key, kv.value} {
			h.Write(lenBuf[:binary.PutUvarint(lenBuf[:], uint64(len(b)))])
			h.Write(b)
		}
		h.Write(lenBuf[:binary.PutVarint(lenBuf[:], kv.version)])
		h.Write(lenBuf[:binary.PutVarint(lenBuf[:], kv.lease)])
	}}
	// One walk per /registry/<resource>/<namespace>/ prefix, in key
	// order, pages of 1000 inside it: a page with a limit also counts
	// every key to the end of its range (etcd's Range answers the
	// total), so pages over the whole key space would cost the square of
	// its size; within a prefix they cost the prefix's.
	names := make([]string, 0, len(bscaleResources))
	for _, r := range bscaleResources {
		names = append(names, r.name)
	}
	sort.Strings(names)
	for _, res := range names {
		for ns := 0; ns < bscaleNamespaces; ns++ {
			prefix := fmt.Sprintf("/registry/%s/team-%03d/", res, ns)
			end := []byte(prefix[:len(prefix)-1] + "0") // '/' + 1
			from := []byte(prefix)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				err := bsScanRange(ctx, conn, &pb.RangeRequest{Key: from, RangeEnd: end, Limit: 1000, Revision: rev}, sc)
				cancel()
				if err != nil {
					return [32]byte{}, n, err
				}
				if !sc.more {
					break
				}
				from = append(append([]byte(nil), sc.lastKey...), 0)
			}
		}
	}
	var d [32]byte
	h.Sum(d[:0])
	return d, n, nil
}

package pagestore

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/strata-db/strata/vfs"
)

var seedFlag = flag.Uint64("seed", 0, "seed for TestModel (0: random); printed by the test so a failure can be replayed")

// modelOps is the number of random operations in TestModel; override with
// STRATA_PAGESTORE_MODEL_OPS for longer soaks.
func modelOps() int {
	if s := os.Getenv("STRATA_PAGESTORE_MODEL_OPS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			return n
		}
	}
	return 100_000
}

type model map[string]map[string]string

func (m model) clone() model {
	out := model{}
	for b, kv := range m {
		c := make(map[string]string, len(kv))
		for k, v := range kv {
			c[k] = v
		}
		out[b] = c
	}
	return out
}

func (m model) sortedKeys(b string) []string {
	ks := keys(m[b])
	sort.Strings(ks)
	return ks
}

// TestModel runs random operations against the DB and an in-memory model:
// put, delete, get, range scans both ways, commit, rollback, bucket
// create/delete, long-lived read snapshots, reopen, and simulated crashes
// (vfs.FaultFS crash at a random write of a commit, torn or not). The
// checker runs after every commit (StrictMode) and after every reopen.
func TestModel(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay: go test ./pagestore -run 'TestModel$' -seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	path := tmpDB(t)
	nops := modelOps()

	var (
		fs            *vfs.FaultFS
		db            *DB
		tx            *Tx
		committed     = model{}
		cur           = model{}
		maxCompressed uint64 // CompressedValues, the most seen by a check at a clean reopen
		snap          *Tx
		snapModel     model
		stats         = map[string]int{}
	)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d: "+format, append([]any{seed}, args...)...)
	}
	open := func() {
		fs = vfs.NewFaultFS(vfs.Default, nil)
		var err error
		// No preallocator (the default): its background writes would make
		// crash points depend on timing, and the seed must replay exactly.
		// Compression is off for some opens: values written either way
		// must read back the same.
		db, err = Open(path, &Options{FS: fs, NoSync: rng.IntN(4) != 0, StrictMode: true, NoCompression: rng.IntN(5) == 0})
		if err != nil {
			fail("open: %v", err)
		}
		checkDB(t, db)
		sameContents(t, dump(t, db), committed)
	}
	begin := func() {
		var err error
		if tx, err = db.Begin(true); err != nil {
			fail("begin: %v", err)
		}
		cur = committed.clone()
	}
	closeSnap := func() {
		if snap != nil {
			if err := snap.Rollback(); err != nil {
				fail("snapshot rollback: %v", err)
			}
			snap = nil
		}
	}
	bucketNames := []string{"alpha", "beta", "gamma"}
	randKey := func() []byte {
		i := rng.IntN(4000)
		switch i % 3 {
		case 0:
			return revKey(uint64(i))
		case 1:
			return []byte(fmt.Sprintf("k%05d", i))
		default:
			return bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 1+i%40)
		}
	}
	// Half the values are random bytes, which do not compress; the other
	// half are runs of a few words, which do: S2 from compressMin bytes,
	// zstd from zstdMin.
	words := make([][]byte, 8)
	for i := range words {
		words[i] = make([]byte, 3+rng.IntN(10))
		for j := range words[i] {
			words[i][j] = byte(rng.Uint32())
		}
	}
	randValue := func() []byte {
		n := rng.IntN(300)
		switch rng.IntN(100) {
		case 0:
			n = 4000 + rng.IntN(20000) // overflow pages
		case 1:
			n = zstdMin + rng.IntN(60000)
		}
		v := make([]byte, 0, n+compressMin+1016)
		if rng.IntN(2) == 0 {
			if rng.IntN(2) == 0 && n < compressMin {
				n = compressMin + rng.IntN(1000)
			}
			for len(v) < n {
				v = append(v, words[rng.IntN(len(words))]...)
			}
			if n >= compressMin {
				stats["put-compressible"]++
			}
			return v[:n]
		}
		for len(v) < n {
			v = append(v, byte(rng.Uint32()))
		}
		return v
	}
	bucket := func(name string) *Bucket {
		b, err := tx.Bucket([]byte(name))
		if err != nil {
			if errors.Is(err, ErrBucketNotFound) {
				return nil
			}
			fail("bucket %q: %v", name, err)
		}
		return b
	}

	open()
	begin()
	for op := 0; op < nops; op++ {
		name := bucketNames[rng.IntN(len(bucketNames))]
		r := rng.IntN(1000)
		switch {
		case r < 430: // put
			b := bucket(name)
			if b == nil {
				var err error
				if b, err = tx.CreateBucket([]byte(name)); err != nil {
					fail("create %q: %v", name, err)
				}
				cur[name] = map[string]string{}
			}
			k, v := randKey(), randValue()
			if err := b.Put(k, v); err != nil {
				fail("put: %v", err)
			}
			cur[name][string(k)] = string(v)
			stats["put"]++
		case r < 680: // delete, mostly of present keys
			b := bucket(name)
			if b == nil {
				continue
			}
			k := randKey()
			if ks := keys(cur[name]); len(ks) > 0 && rng.IntN(4) != 0 {
				k = []byte(ks[rng.IntN(len(ks))])
			}
			if err := b.Delete(k); err != nil {
				fail("delete: %v", err)
			}
			delete(cur[name], string(k))
			stats["delete"]++
		case r < 780: // get
			b := bucket(name)
			if b == nil {
				continue
			}
			k := randKey()
			v, err := b.Get(k)
			if err != nil {
				fail("get: %v", err)
			}
			want, ok := cur[name][string(k)]
			if (v != nil) != ok || string(v) != want {
				fail("op %d get %q/%x: got %d bytes (nil %v), want %d (present %v)", op, name, k, len(v), v == nil, len(want), ok)
			}
			stats["get"]++
		case r < 840: // range scan, forwards or backwards
			b := bucket(name)
			if b == nil {
				continue
			}
			ks := cur.sortedKeys(name)
			seek := randKey()
			i := sort.SearchStrings(ks, string(seek))
			c := b.Cursor()
			k, v := c.Seek(seek)
			back := rng.IntN(2) == 0
			for step := 0; step < 30; step++ {
				if i < 0 || i >= len(ks) {
					if k != nil {
						fail("op %d range %q: got key %x past the end", op, name, k)
					}
					break
				}
				if string(k) != ks[i] || string(v) != cur[name][ks[i]] {
					fail("op %d range %q step %d: got %x, want %x", op, name, step, k, ks[i])
				}
				if back {
					k, v = c.Prev()
					i--
				} else {
					k, v = c.Next()
					i++
				}
			}
			if c.Err() != nil {
				fail("cursor: %v", c.Err())
			}
			stats["range"]++
		case r < 900: // commit
			if err := tx.Commit(); err != nil {
				fail("op %d commit: %v", op, err)
			}
			committed = cur
			if rng.IntN(4) == 0 {
				// As an idle server does: the next writer starts with no
				// kept buffers and reads the last commit's pages from the
				// mapping.
				db.TrimMemory()
				stats["trim"]++
			}
			begin()
			stats["commit"]++
		case r < 915: // rollback
			if err := tx.Rollback(); err != nil {
				fail("rollback: %v", err)
			}
			begin()
			stats["rollback"]++
		case r < 925: // delete a bucket
			if bucket(name) == nil {
				continue
			}
			if err := tx.DeleteBucket([]byte(name)); err != nil {
				fail("delete bucket: %v", err)
			}
			delete(cur, name)
			stats["deletebucket"]++
		case r < 945: // open, check or close a long-lived read snapshot
			if snap == nil {
				var err error
				if snap, err = db.Begin(false); err != nil {
					fail("begin read: %v", err)
				}
				snapModel = committed
				continue
			}
			for bn, kv := range snapModel {
				b, err := snap.Bucket([]byte(bn))
				if err != nil {
					fail("snapshot bucket %q: %v", bn, err)
				}
				for k, v := range kv {
					got, err := b.Get([]byte(k))
					if err != nil || string(got) != v {
						fail("op %d snapshot tx %d: key %x changed (err %v)", op, snap.ID(), k, err)
					}
					break
				}
			}
			if rng.IntN(3) == 0 {
				closeSnap()
			}
			stats["snapshot"]++
		case r < 950: // clean reopen
			if err := tx.Rollback(); err != nil {
				fail("rollback: %v", err)
			}
			closeSnap()
			if err := db.Close(); err != nil {
				fail("close: %v", err)
			}
			rep, err := CheckFile(path, nil)
			if err != nil || !rep.OK() {
				fail("check file at a clean reopen: %v %v", err, rep.Problems)
			}
			maxCompressed = max(maxCompressed, rep.CompressedValues)
			open()
			begin()
			stats["reopen"]++
		case r < 955: // crash during a commit
			closeSnap()
			var n int
			at := 1 + rng.IntN(6)
			torn := rng.IntN(2) == 0
			fs.SetHook(func(ev vfs.Event) *vfs.Fault {
				if ev.Op != vfs.OpWrite && ev.Op != vfs.OpSync {
					return nil
				}
				if n++; n < at {
					return nil
				}
				f := &vfs.Fault{Crash: true}
				if torn && ev.Op == vfs.OpWrite {
					f.Written = rng.IntN(ev.Len + 1)
				}
				return f
			})
			want := tx.ID()
			err := tx.Commit()
			if !fs.Crashed() {
				if err != nil {
					fail("commit: %v", err)
				}
				fs.SetHook(nil)
				committed = cur
				begin()
				continue
			}
			if err == nil {
				fail("commit succeeded despite a crash")
			}
			if err := db.Close(); err != nil {
				fail("close after crash: %v", err)
			}
			fs = vfs.NewFaultFS(vfs.Default, nil)
			db2, err := Open(path, &Options{FS: fs, NoSync: true, StrictMode: true})
			if err != nil {
				fail("open after crash: %v", err)
			}
			var got uint64
			_ = db2.View(func(rtx *Tx) error { got = rtx.ID(); return nil })
			switch got {
			case want:
				committed = cur
			case want - 1:
			default:
				fail("after crash in commit of tx %d, reopened at tx %d", want, got)
			}
			db2.Close()
			open()
			begin()
			stats["crash"]++
		}
	}
	if err := tx.Commit(); err != nil {
		fail("final commit: %v", err)
	}
	closeSnap()
	sameContents(t, dump(t, db), cur)
	checkDB(t, db)
	db.Close()
	rep, err := CheckFile(path, nil)
	if err != nil || !rep.OK() {
		fail("check file: %v %v", err, rep.Problems)
	}
	maxCompressed = max(maxCompressed, rep.CompressedValues)
	t.Logf("ops %v; values stored compressed: %d at the end, at most %d at a clean reopen", stats, rep.CompressedValues, maxCompressed)
	// The end state alone can hold none (deletes, bucket deletes, a last
	// stretch opened with NoCompression), so the file is checked at every
	// clean reopen as well, and compression must have shown in one of them.
	if stats["put-compressible"] >= 200 && maxCompressed == 0 {
		fail("%d compressible values put, none ever stored compressed", stats["put-compressible"])
	}
}

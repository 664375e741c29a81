package pagestore

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"
)

func init() {
	if os.Getenv("STRATA_DEBUG_FL") != "" {
		var failed bool
		debugCommitHook = func(tx *Tx) {
			db := tx.db
			if failed {
				return
			}
			m := db.meta.Load()
			fl, err := loadFreelist(db.path, m, db.pageSize, func(id pgid) ([]byte, error) { return db.verifyPage(id, m.hwm, false) })
			if err != nil {
				failed = true
				fmt.Printf("DEBUG tx %d: %v\n", m.txid, err)
				return
			}
			mem := db.fl.free.clone()
			for _, p := range db.fl.pending {
				for _, e := range p.ext {
					mem.add(e.start, e.n)
				}
			}
			if fmt.Sprint(mem.ext) != fmt.Sprint(fl.free.ext) {
				failed = true
				fmt.Printf("DEBUG tx %d (dirty %d freed %v allocd %v truncated %v ckpt %v): mem %v\nlog %v\npending %v\n", m.txid, len(tx.dirty), tx.freed, tx.allocd, tx.truncated, tx.forceCheckpoint, mem.ext, fl.free.ext, db.fl.pending)
			}
		}
	}
	if os.Getenv("STRATA_DEBUG_DEFRAG") != "" {
		var failed bool
		debugDefragCheck = func(db *DB, moved int, chain bool) {
			if failed {
				return
			}
			db.writeMu.Lock()
			defer db.writeMu.Unlock()
			if err := db.checkLatest(); err != nil {
				failed = true
				fmt.Printf("DEBUG after defrag step tx %d (moved %d chain %v): %v\n", db.meta.Load().txid, moved, chain, err)
			}
		}
	}
}

// debugPages explains a "both reachable and free" checker failure: which
// freelist records mention the page. Caller holds the write lock.
func debugPages(t *testing.T, db *DB) {
	m := db.meta.Load()
	err := newChecker(db, m, 20).run()
	if err == nil {
		return
	}
	re := regexp.MustCompile(`page (\d+) \(offset \d+\): page is both`)
	sm := re.FindStringSubmatch(err.Error())
	if sm == nil {
		return
	}
	n, _ := strconv.ParseUint(sm[1], 10, 64)
	x := pgid(n)
	t.Logf("page %d: in-memory free %v pending %v hwm %d", x, db.fl.free.contains(x), db.fl.pendingContains(x), m.hwm)
	for id := m.flHead; id != 0; {
		p, _ := db.verifyPage(id, m.hwm, false)
		r, _ := decodeFreelistRecord(p, id, db.pageSize)
		for _, e := range r.alloc {
			if x >= e.start && x < e.end() {
				t.Logf("record %d tx %d kind %d hwm %d: alloc %v", id, r.txid, r.kind, r.hwm, e)
			}
		}
		for _, e := range r.freed {
			if x >= e.start && x < e.end() {
				t.Logf("record %d tx %d kind %d hwm %d: freed %v", id, r.txid, r.kind, r.hwm, e)
			}
		}
		if r.kind == flKindCheckpt {
			break
		}
		id = r.prev
	}
}

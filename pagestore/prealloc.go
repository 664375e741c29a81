package pagestore

import "errors"

// Zero-filled preallocation.
//
// A commit's fdatasync is much cheaper when the pages it wrote already had
// initialized blocks on disk: writing into a hole (a sparse tail made by
// ftruncate, or an unwritten fallocate extent) makes the file system
// allocate or convert extents, and fdatasync must then commit that
// metadata to the journal as well as flush the data. So a background
// goroutine keeps a zero-filled, synced region of preallocAhead bytes
// beyond the high-water mark, off the commit path. Measured on ext4 here,
// a 70-page commit with two fdatasyncs took about half as long into a
// zero-filled region as into a sparse one.
//
// Protocol (all under sizeMu):
//   - zeroed: [0, zeroed) has initialized blocks (committed pages, or
//     zeros written and synced by the preallocator).
//   - zeroBusy while the preallocator writes zeros above zeroed;
//     it works outside sizeMu, so the writer, before writing pages that
//     end above zeroed, waits on sizeCond until no zeroing is in flight.
//     The preallocator only ever writes above the writer's reserved size,
//     and the writer never writes into a range being zeroed.
//   - After writing its pages the writer raises zeroed to what it wrote,
//     and wakes the preallocator when fewer than preallocAhead/2 bytes of
//     zeroed space remain.
// The region beyond hwm holds no live page of the newest durable commit,
// so overwriting it with zeros is always safe.

var errPreallocStopped = errors.New("preallocation stopped")

func preallocAhead(need int64) int64 {
	return min(max(need/16, 1<<20), 256<<20)
}

// kickPrealloc wakes the preallocator if the zeroed tail is running out.
// Caller holds sizeMu and writeMu.
func (db *DB) kickPrealloc(need int64) {
	if db.zeroCh == nil || db.zeroed-need >= preallocAhead(need)/2 {
		return
	}
	select {
	case db.zeroCh <- struct{}{}:
	default:
	}
}

func (db *DB) preallocLoop() {
	defer close(db.zeroDone)
	buf := make([]byte, 1<<20)
	for range db.zeroCh {
		db.sizeMu.Lock()
		f := db.file
		need := db.reserved
		ahead := preallocAhead(need)
		if f == nil || db.zeroed-need >= ahead/2 {
			db.sizeMu.Unlock()
			continue
		}
		ps := int64(db.pageSize)
		start := db.zeroed
		end := min((need+ahead+ps-1)/ps*ps, db.opts.MaxMapSize)
		if end <= start {
			db.sizeMu.Unlock()
			continue
		}
		db.zeroBusy = true
		db.sizeMu.Unlock()

		var err error
		for off := start; off < end && err == nil; off += int64(len(buf)) {
			if db.zeroStop.Load() {
				err = errPreallocStopped
				break
			}
			err = writeFull(f, buf[:min(int64(len(buf)), end-off)], off)
		}
		if err == nil && !db.opts.NoSync {
			err = f.Sync()
		}

		db.sizeMu.Lock()
		if err == nil {
			db.zeroed = end
			if end > db.fileSize {
				db.fileSize = end
				db.st.fileSize.Store(end)
			}
		} else if err != errPreallocStopped {
			db.log.Warn("pagestore: preallocation failed", "path", db.path, "offset", start, "err", err)
		}
		db.zeroBusy = false
		db.sizeCond.Broadcast()
		db.sizeMu.Unlock()
	}
}

// stopPrealloc ends the preallocator; caller holds writeMu.
func (db *DB) stopPrealloc() {
	if db.zeroCh == nil {
		return
	}
	db.zeroStop.Store(true)
	close(db.zeroCh)
	<-db.zeroDone
	db.zeroCh = nil
}

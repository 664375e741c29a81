package pagestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// compactBatchBytes bounds the data copied per write transaction by
// Compact, which bounds its memory use.
const compactBatchBytes = 16 << 20

// Compact writes a compacted copy of the database at src to dst (offline
// defrag). dst must not exist. Keys are copied bucket by bucket in order,
// so every leaf of the copy is full and the copy has no free pages.
// Opening src takes its lock, so Compact fails with ErrDatabaseLocked while
// a server has it open. progress, if non-nil, is called with bytes copied
// so far and the bytes in use in src (an estimate of the total), first
// with 0 once src is open and locked, so a caller that draws a progress
// bar on that first call never draws one for a database it cannot have.
//
// The copy is synced (file and directory) before Compact returns; on error
// a partial dst is removed.
func Compact(dst, src string, progress func(done, total int64)) (err error) {
	if _, err := os.Stat(dst); err == nil {
		return fmt.Errorf("pagestore: compact: %s already exists", dst)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pagestore: compact: %w", err)
	}
	sdb, err := Open(src, nil)
	if err != nil {
		return err
	}
	defer sdb.Close()
	ddb, err := Open(dst, &Options{NoSync: true})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := ddb.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	total := sdb.Stats().InUseBytes
	var done int64
	report := func() {
		if progress != nil {
			progress(min(done, total), total)
		}
	}
	report()
	err = sdb.View(func(stx *Tx) error {
		return stx.ForEach(func(name []byte, sb *Bucket) error {
			c := sb.Cursor()
			k, v := c.First()
			first := true
			for first || k != nil {
				first = false
				// One write transaction per batch of about compactBatchBytes.
				err := ddb.Update(func(dtx *Tx) error {
					db, err := dtx.CreateBucketIfNotExists(name)
					if err != nil {
						return err
					}
					var n int64
					for ; k != nil && n < compactBatchBytes; k, v = c.Next() {
						if err := db.Put(k, v); err != nil {
							return err
						}
						n += int64(len(k) + len(v) + elemSize)
					}
					done += n
					return c.Err()
				})
				if err != nil {
					return err
				}
				report()
			}
			return c.Err()
		})
	})
	if err != nil {
		return err
	}
	if err := ddb.Sync(); err != nil {
		return err
	}
	if err := ddb.fs.SyncDir(filepath.Dir(dst)); err != nil {
		return err
	}
	done = total
	report()
	return nil
}

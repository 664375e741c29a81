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
	if err := checkAbsent(dst); err != nil {
		return err
	}
	sdb, err := Open(src, nil)
	if err != nil {
		return err
	}
	defer sdb.Close()
	return compactInto(dst, sdb, progress)
}

func checkAbsent(dst string) error {
	if _, err := os.Stat(dst); err == nil {
		return fmt.Errorf("pagestore: compact: %s already exists", dst)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pagestore: compact: %w", err)
	}
	return nil
}

// CompactResult is what CompactInPlace did.
type CompactResult struct {
	Before, Copy int64 // file sizes in bytes: the database, the compacted copy
	Replaced     bool  // the copy replaced the database
}

// compactBeforeRename, if set (by tests), runs in CompactInPlace after the
// copy is durable and before it is renamed over the database.
var compactBeforeRename func()

// CompactInPlace is offline defrag of the database at path: it writes a
// compacted copy to path+".defrag.tmp" and, if keep(Before, Copy) says so,
// renames it over path and syncs the directory; otherwise the copy is
// removed and the database left byte for byte as it was.
//
// The database's lock is held from before the copy starts until after the
// rename: a server that opens the old file meanwhile gets ErrDatabaseLocked
// instead of writing into a file the rename is about to unlink (all its
// writes would be lost), and one that opens the path after the rename
// gets the new file.
func CompactInPlace(path string, progress func(done, total int64), keep func(before, copy int64) bool) (res CompactResult, err error) {
	tmp := path + ".defrag.tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return res, fmt.Errorf("pagestore: compact: %w", err)
	}
	sdb, err := Open(path, nil)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := sdb.Close(); err == nil {
			err = cerr
		}
	}()
	res.Before = sdb.Stats().FileSize
	if err := compactInto(tmp, sdb, progress); err != nil {
		return res, err
	}
	fi, err := os.Stat(tmp)
	if err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("pagestore: compact: %w", err)
	}
	res.Copy = fi.Size()
	if !keep(res.Before, res.Copy) {
		if err := os.Remove(tmp); err != nil {
			return res, fmt.Errorf("pagestore: compact: %w", err)
		}
		return res, nil
	}
	if compactBeforeRename != nil {
		compactBeforeRename()
	}
	if err := sdb.fs.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("pagestore: compact: %w", err)
	}
	if err := sdb.fs.SyncDir(filepath.Dir(path)); err != nil {
		return res, fmt.Errorf("pagestore: compact: %w", err)
	}
	res.Replaced = true
	return res, nil
}

// compactInto writes the compacted copy of the open sdb to dst.
func compactInto(dst string, sdb *DB, progress func(done, total int64)) (err error) {
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

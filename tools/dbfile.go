package tools

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
)

// Opening database files for the offline tools: telling Strata's page
// store from etcd's bbolt file (and both from anything else) with an
// error that says where the check failed, and waiting for the lock a
// running server holds, as etcdutl's --timeout waits for bbolt's.

// lockPoll is how often a tool tries again to lock a db file another
// process holds (bbolt polls its flock as often).
const lockPoll = 50 * time.Millisecond

// onLockWait, if set, is called each time an open found the file locked
// and is about to wait; tests use it to release the lock only once the
// tool is known to be waiting.
var onLockWait func(path string)

// ErrLockTimeout means the db file stayed locked by another process for
// the whole --timeout.
var ErrLockTimeout = errors.New("timed out waiting for the lock on the db file")

// withLockWait runs open until it does not fail with
// pagestore.ErrDatabaseLocked, for at most timeout (0: forever).
func withLockWait(path string, timeout time.Duration, open func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := open()
		if err == nil || !errors.Is(err, pagestore.ErrDatabaseLocked) {
			return err
		}
		if timeout > 0 && !time.Now().Before(deadline) {
			return fmt.Errorf("%w (%w)", lockTimeoutError(path, timeout), err)
		}
		if onLockWait != nil {
			onLockWait(path)
		}
		wait := lockPoll
		if timeout > 0 {
			wait = min(wait, time.Until(deadline))
		}
		time.Sleep(max(wait, time.Millisecond))
	}
}

func lockTimeoutError(path string, timeout time.Duration) error {
	return fmt.Errorf("%w: %s is in use by another process (is a server running on it? stop it first): its lock was not released within --timeout %v (--timeout 0 waits forever)",
		ErrLockTimeout, path, timeout)
}

// openPageStore opens a page store, waiting up to timeout (0: forever)
// for a running server to let go of it.
func openPageStore(path string, opts *pagestore.Options, timeout time.Duration) (*pagestore.DB, error) {
	var db *pagestore.DB
	err := withLockWait(path, timeout, func() error {
		var err error
		db, err = pagestore.Open(path, opts)
		return err
	})
	return db, err
}

// openBoltReadOnly opens an etcd bbolt file read-only, waiting up to
// timeout (0: forever, bbolt's own meaning) for its writer to let go.
func openBoltReadOnly(path string, timeout time.Duration) (*bolt.DB, error) {
	if onLockWait != nil {
		// bbolt waits by itself; tell a test when the file is held.
		if f, err := os.Open(path); err == nil {
			if flockBusy(f) {
				onLockWait(path)
			}
			f.Close()
		}
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: timeout})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, lockTimeoutError(path, timeout)
	}
	return db, err
}

// dbFileFormat names the format of the database file at path from its
// header: Strata's page store, etcd's bbolt file, or FormatUnknown for
// anything else (whose open as a page store then says what is wrong,
// since a page store whose first meta page is damaged still opens from
// its second). A missing file is the os.Stat error as it is (etcdutl's
// message for it); a directory or a file too short for a header is an
// error naming the file.
func dbFileFormat(path string) (schema.Format, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return schema.FormatUnknown, err
	}
	if fi.IsDir() {
		return schema.FormatUnknown, fmt.Errorf("%s is a directory, not a database file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return schema.FormatUnknown, err
	}
	defer f.Close()
	head := make([]byte, schema.HeaderSize)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return schema.FormatUnknown, fmt.Errorf("%s: read the header at offset 0: %w", path, err)
	}
	if ft := schema.Detect(head[:n]); ft != schema.FormatUnknown {
		return ft, nil
	}
	if n < schema.HeaderSize {
		return schema.FormatUnknown, fmt.Errorf("%s is %d bytes, too short to be a database: a Strata page store or an etcd (bbolt) file starts with a %d-byte header "+
			"holding its magic at offset %d (page store) or %d (bbolt)", path, n, schema.HeaderSize,
			schema.MagicOffset(schema.FormatStrata), schema.MagicOffset(schema.FormatEtcd))
	}
	return schema.FormatUnknown, nil
}

// notADatabase is the error for a file of neither format, given what
// opening it as a page store said.
func notADatabase(path string, pageErr error) error {
	return fmt.Errorf("%s is neither a Strata page store nor an etcd (bbolt) database: no bbolt magic at offset %d, "+
		"no page-store magic at offset %d, and as a page store: %w", path,
		schema.MagicOffset(schema.FormatEtcd), schema.MagicOffset(schema.FormatStrata), pageErr)
}

// CheckStrataDB refuses an etcd (bbolt) file where a Strata page store is
// needed, naming what to use instead. Other files pass: opening them says
// what is wrong with them.
func CheckStrataDB(path string) error {
	ft, err := dbFileFormat(path)
	if err != nil {
		return err
	}
	if ft == schema.FormatEtcd {
		return fmt.Errorf("%s is an etcd (bbolt) database, not a Strata page store: use etcdutl (or 'bbolt check') on it, "+
			"or move it to Strata with 'stratautl snapshot restore %s --skip-hash-check --data-dir NEW_DIR'", path, path)
	}
	return nil
}

// DataDirDB returns the page store of a Strata data dir (DIR/member/snap/db).
// A missing file is the os.Stat error (etcdutl's message); an etcd data
// dir, whose db is bbolt, is an error that names the Strata command that
// moves it to Strata. A file of neither format passes: opening it as a
// page store names the offsets where it is damaged.
func DataDirDB(dataDir string) (string, error) {
	db := filepath.Join(dataDir, "member", "snap", "db")
	ft, err := dbFileFormat(db)
	if err != nil {
		return "", err
	}
	if ft == schema.FormatEtcd {
		return "", EtcdDataDirError(dataDir)
	}
	return db, nil
}

// EtcdDataDirError is the error for an etcd data dir given where a
// Strata data dir is needed.
func EtcdDataDirError(dataDir string) error {
	db := filepath.Join(dataDir, "member", "snap", "db")
	return fmt.Errorf("%s is an etcd (bbolt) database, so %s is an etcd data dir; stratautl works on Strata data dirs "+
		"(use etcdutl on this one). To move it to Strata, stop etcd and run "+
		"'stratautl snapshot restore %s --skip-hash-check --data-dir NEW_DIR' (or restore a snapshot from 'etcdctl snapshot save'), "+
		"then start strata on NEW_DIR", db, dataDir, db)
}

// flockBusy reports whether another open file holds an exclusive flock
// on f (a shared one could not be taken at once).
func flockBusy(f *os.File) bool {
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// RetryLocked runs fn again while it fails because another process holds
// the db file at path locked (pagestore.ErrDatabaseLocked), for at most
// timeout (0: forever); then it fails with ErrLockTimeout naming the file.
func RetryLocked(path string, timeout time.Duration, fn func() error) error {
	return withLockWait(path, timeout, fn)
}

package tools

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/wal"
)

// WALVerifyDataDir verifies the WAL of a data dir (in walDir, default
// dataDir/member/wal) as WALVerify does, then compares it with the page
// store: the page store's consistent index must not be past the WAL's
// last index, or the member would refuse to start. That failure is the
// *raft.WALBehindError the member itself would return (errors.Is
// raft.ErrWALBehind), so both say the same. The page store is opened
// read-only; a running server holds it, so this fails while one does.
func WALVerifyDataDir(dataDir, walDir string, showProgress bool) (*WALVerifyResult, error) {
	if walDir == "" {
		walDir = filepath.Join(dataDir, "member", "wal")
	}
	dbPath := filepath.Join(dataDir, "member", "snap", "db")
	if _, err := os.Stat(dbPath); err != nil {
		return nil, fmt.Errorf("no page store in data dir %s (%w): pass the data dir a member was started with", dataDir, err)
	}
	ci, err := readConsistentIndex(dbPath)
	if err != nil {
		return nil, err
	}
	if !wal.Exist(nil, walDir) {
		if ci == 0 {
			return nil, fmt.Errorf("%w in %s, and the page store %s is empty: a member that never started", wal.ErrNotFound, walDir, dbPath)
		}
		return nil, &raft.WALBehindError{WALDir: walDir, NoWAL: true, StatePath: dbPath, ConsistentIndex: ci}
	}
	res, err := WALVerify(walDir, showProgress)
	if err != nil {
		return res, err
	}
	res.DBPath, res.ConsistentIndex = dbPath, ci
	if last := res.LastIndex(); ci > last {
		return res, &raft.WALBehindError{WALDir: walDir, WALLastIndex: last, StatePath: dbPath, ConsistentIndex: ci}
	}
	return res, nil
}

// readConsistentIndex reads the consistent index of a page store file,
// read-only.
func readConsistentIndex(dbPath string) (uint64, error) {
	db, err := pagestore.Open(dbPath, &pagestore.Options{ReadOnly: true})
	if err != nil {
		if errors.Is(err, pagestore.ErrDatabaseLocked) {
			return 0, fmt.Errorf("%w: a running member holds it; stop it first (the comparison needs a page store nobody writes)", err)
		}
		return 0, err
	}
	defer db.Close()
	var ci uint64
	err = db.View(func(tx *pagestore.Tx) error {
		var err error
		ci, _, err = mvcc.ReadConsistentIndex(tx) // 0 if never written by a member
		return err
	})
	return ci, err
}

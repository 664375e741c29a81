package pagestore

import (
	"errors"
	"fmt"
)

// CheckOptions configure CheckFile.
type CheckOptions struct {
	// Progress, if set, is called from time to time with the pages
	// checked so far and the total (the high-water mark).
	Progress func(done, total int64)
	// MaxProblems bounds the problems listed in the report; the rest are
	// only counted (CheckReport.Omitted). Default 100.
	MaxProblems int
}

// CheckFile checks the database file at path completely, offline: both
// meta pages, then everything Tx.Check checks from the newest valid meta.
// The file is opened as Options.ReadOnly opens it: never written, and
// refused with ErrDatabaseLocked while a writer (a running server) has it
// open, because pages a live writer reuses could change under the check.
// A freelist log that cannot be read is reported, and the trees are
// checked anyway.
//
// Corruption is reported in the CheckReport (each problem with its page
// and byte offset), not as an error; the error is for a file that could
// not be checked at all (missing, locked, unreadable). A file with no
// valid meta page gives a report with only the meta problems.
func CheckFile(path string, o *CheckOptions) (*CheckReport, error) {
	var opts CheckOptions
	if o != nil {
		opts = *o
	}
	if opts.MaxProblems <= 0 {
		opts.MaxProblems = 100
	}
	db := newDB(path, (&Options{ReadOnly: true}).withDefaults())
	db.checking = true
	if err := db.open(); err != nil {
		db.closeFiles()
		if !errors.Is(err, ErrCorrupt) {
			return nil, err
		}
		return openFailureReport(db, err), nil
	}
	defer db.Close()
	m := db.meta.Load()
	c := newChecker(db, m, opts.MaxProblems)
	c.progress = opts.Progress
	if c.progress != nil {
		c.progress(0, int64(m.hwm))
	}
	c.rep.FileSize = db.fileSize
	for slot, err := range db.metaErrs {
		if err != nil {
			c.problem(pgid(slot), "meta page invalid: %v (the database opens from the other meta page, tx %d; "+
				"a meta write torn by a crash looks the same, and the next commit rewrites it)", err, m.txid)
		}
	}
	c.check()
	if c.progress != nil {
		c.progress(c.done, int64(m.hwm))
	}
	return c.rep, nil
}

// openFailureReport describes a file open refused as corrupt: no valid
// meta page (one problem per slot, at its offset), or a meta that needs
// more pages than the file has.
func openFailureReport(db *DB, err error) *CheckReport {
	r := &CheckReport{Path: db.path, BucketKeys: map[string]uint64{}}
	if st, serr := db.fs.Stat(db.path); serr == nil {
		r.FileSize = st.Size()
	}
	if db.metaErrs[0] != nil && db.metaErrs[1] != nil {
		for slot, merr := range db.metaErrs {
			off := db.metaOffs[slot]
			r.Problems = append(r.Problems, Problem{Page: int64(slot), Offset: off,
				What: fmt.Sprintf("meta page invalid: %v", merr)})
		}
		r.Problems = append(r.Problems, Problem{Page: -1, Offset: -1,
			What: "no valid meta page: this is not a Strata page store, or both meta pages are damaged; nothing else can be checked"})
		return r
	}
	msg := err.Error()
	if prefix := fmt.Sprintf("%v: %s: ", ErrCorrupt, db.path); len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		msg = msg[len(prefix):]
	}
	r.Problems = append(r.Problems, Problem{Page: -1, Offset: -1, What: msg})
	return r
}

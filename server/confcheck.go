package server

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
)

// Committed conf changes are checked as etcd checks them, against the
// membership the log's own changes leave (membership.View), twice: by
// the raft goroutine before raft applies a change (confChecker, the
// raft.ConfChecker), and by the apply goroutine before the member list
// does (applier.view, persisted with each change). Both views start from
// the same state, at Start or at the install of a snapshot, and see the
// same changes in the same order, so they decide alike; so do etcd's
// members, which check against their members buckets at the entry's
// index.

// errRefusedBefore is the raft goroutine's answer for a replayed change
// that the state machine refused when it first applied it.
var errRefusedBefore = errors.New("refused when it was first applied")

// confChecker is the raft goroutine's view.
type confChecker struct {
	s    *Server
	view *membership.View
	// ci is the consistent index of the state view was loaded from:
	// changes at or below it were decided then (View.Refused).
	ci uint64
}

// Load reads the view of the state machine (path "") or of a received
// image. The state machine's own load also resets the apply goroutine's
// view: nothing is applied while Start calls it.
func (c *confChecker) Load(path string) error {
	if path == "" {
		ci, v, err := loadView(c.s.be.DB())
		if err != nil {
			return err
		}
		c.ci, c.view = ci, v
		c.s.applier.view = v.Clone()
		return nil
	}
	db, err := pagestore.Open(path, &pagestore.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer db.Close()
	ci, v, err := loadView(db)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	c.ci, c.view = ci, v
	return nil
}

func (c *confChecker) Check(index uint64, cc *raftpb.ConfChange) error {
	if index <= c.ci {
		if c.view.Refused(index) {
			return errRefusedBefore
		}
		return nil
	}
	return c.view.Apply(index, cc, c.s.cfg.MaxLearners)
}

// loadView reads the consistent index and the conf view persisted in db.
func loadView(db *pagestore.DB) (ci uint64, v *membership.View, err error) {
	err = db.View(func(tx *pagestore.Tx) error {
		if ci, _, err = mvcc.ReadConsistentIndex(tx); err != nil {
			return err
		}
		v, err = membership.LoadView(tx, ci)
		return err
	})
	return ci, v, err
}

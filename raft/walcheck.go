package raft

import (
	"errors"
	"fmt"
)

// ErrWALBehind means the state machine has made durable the effects of
// entries that the WAL no longer holds: its consistent index is past the
// WAL's last entry, or there is no WAL at all. Match it with errors.Is;
// the error is a *WALBehindError.
var ErrWALBehind = errors.New("raft: the WAL is behind the state machine")

// WALBehindError is the refusal to start on a WAL that is behind the
// state machine. Nothing durable may run ahead of the WAL (see the package
// doc), so this state is never the result of a crash: WAL segments were
// deleted or truncated, the disk lost writes, or the WAL directory is the
// wrong one. Starting anyway would lose the raft term and vote the lost
// records held (a vote cast twice in one term breaks raft's safety), and on
// a single member every new entry would get an index the state machine
// already holds, so it would skip them and every write would time out.
type WALBehindError struct {
	WALDir string
	// WALLastIndex is the index of the last entry the WAL holds (or of its
	// last snapshot marker, if no entry follows it).
	WALLastIndex uint64
	// NoWAL is set when WALDir holds no WAL at all.
	NoWAL bool
	// StatePath is the state machine's file (the page store); may be "".
	StatePath string
	// ConsistentIndex is the state machine's consistent index.
	ConsistentIndex uint64
}

func (e *WALBehindError) Is(target error) bool { return target == ErrWALBehind }

func (e *WALBehindError) Error() string {
	state := "the page store"
	if e.StatePath != "" {
		state += " " + e.StatePath
	}
	var what string
	if e.NoWAL {
		what = fmt.Sprintf("raft: the WAL directory %s holds no WAL, but %s has applied entries up to index %d (its consistent index): "+
			"this data belonged to a member whose WAL was deleted or is elsewhere",
			e.WALDir, state, e.ConsistentIndex)
	} else {
		what = fmt.Sprintf("raft: the WAL in %s ends at index %d, but %s has applied entries up to index %d (its consistent index): "+
			"the %d entries after index %d are missing from the WAL (segments deleted or truncated, or lost by the disk)",
			e.WALDir, e.WALLastIndex, state, e.ConsistentIndex, e.ConsistentIndex-e.WALLastIndex, e.WALLastIndex)
	}
	db := "DATA-DIR/member/snap/db"
	if e.StatePath != "" {
		db = e.StatePath
	}
	return what + "; the member refuses to start, because it would have lost its raft term and vote and could not commit new writes. " +
		"The page store itself is intact up to index " + fmt.Sprint(e.ConsistentIndex) + ". To recover: " +
		"(1) if --wal-dir points at the wrong or an old directory, start with the right one; " +
		"(2) in a cluster whose other members have a quorum, replace this member: 'etcdctl member remove ID', move this data dir aside, " +
		"'etcdctl member add NAME --peer-urls=URL', and start it on an empty data dir with --initial-cluster-state=existing; " +
		"(3) otherwise rebuild the data dir from this page store (or from your latest backup): 'stratautl snapshot restore " + db +
		" --skip-hash-check --data-dir NEW-DIR --name NAME --initial-cluster ... --initial-advertise-peer-urls ...' with this member's " +
		"cluster flags, then start strata on NEW-DIR (in a cluster, restore every member from the same file). " +
		"'stratautl wal verify --data-dir DATA-DIR' shows both indexes."
}

// checkWALCovers refuses a WAL whose last index (0 when there is no WAL)
// lies below the state machine's consistent index.
func (n *Node) checkWALCovers(walLast uint64, noWAL bool) error {
	ci := n.sm.ConsistentIndex()
	if ci <= walLast {
		return nil
	}
	return &WALBehindError{WALDir: n.cfg.WALDir, WALLastIndex: walLast, NoWAL: noWAL,
		StatePath: n.cfg.StatePath, ConsistentIndex: ci}
}

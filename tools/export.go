package tools

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-db/strata/etcdsnap"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/progress"
	"github.com/strata-db/strata/schema"
	"github.com/strata-db/strata/vfs"
	"github.com/strata-db/strata/wal"
)

// ExportConfig configures ExportEtcd.
type ExportConfig struct {
	DataDir string // the Strata data dir (member/snap/db)
	WALDir  string // default DataDir/member/wal; only read, for a warning
	Out     string // the snapshot.db to write; must not exist
	// Progress, if set, receives a progress bar.
	Progress io.Writer
}

// ExportSummary is what ExportEtcd wrote.
type ExportSummary struct {
	Out       string        `json:"out"`
	Revision  int64         `json:"revision"`
	Records   int           `json:"revisionRecords"`
	Keys      int           `json:"totalKey"`
	Leases    int           `json:"leases"`
	Users     int           `json:"users"`
	Roles     int           `json:"roles"`
	Members   int           `json:"members"`
	RaftIndex uint64        `json:"raftIndex"` // meta consistent_index
	RaftTerm  uint64        `json:"raftTerm"`  // meta term
	Size      int64         `json:"size"`      // the file, trailer included
	SHA256    string        `json:"sha256"`    // the trailer
	Skipped   []string      `json:"skippedBuckets,omitempty"`
	Warnings  []string      `json:"warnings,omitempty"`
	Took      time.Duration `json:"took"`
}

// ExportEtcd writes the page store of a stopped Strata member as an etcd
// snapshot.db: a bbolt database in etcd's schema (the data buckets as they
// are, the membership converted to etcd's records, meta with
// consistent_index, term, confState and storageVersion, the cluster
// version) followed by the SHA-256 trailer 'etcdctl snapshot save'
// writes, so that etcdutl snapshot status and restore accept it. It is
// the file Maintenance.Snapshot streams (package etcdsnap writes both).
//
// It refuses while a server holds the data dir (the page store's lock).
// Buckets that are Strata's own are left out and listed in the summary.
func ExportEtcd(cfg ExportConfig) (sum *ExportSummary, err error) {
	start := time.Now()
	dbPath := filepath.Join(cfg.DataDir, "member", "snap", "db")
	head := make([]byte, 64)
	if f, err := os.Open(dbPath); err != nil {
		return nil, fmt.Errorf("no Strata page store at %s: %w", dbPath, err)
	} else {
		_, rerr := io.ReadFull(f, head)
		f.Close()
		if rerr != nil {
			return nil, fmt.Errorf("%s: %w", dbPath, rerr)
		}
	}
	switch snapshotFormat(head) {
	case "strata":
	case "etcd":
		return nil, fmt.Errorf("%s is an etcd (bbolt) database, already in etcd's format: copy it, or take a snapshot with 'etcdctl snapshot save'", dbPath)
	default:
		return nil, fmt.Errorf("%s is not a Strata page store (no magic at offset %d)", dbPath, schema.MagicOffset(schema.FormatStrata))
	}
	if _, err := os.Lstat(cfg.Out); err == nil {
		return nil, fmt.Errorf("%s exists; remove it or choose another --out", cfg.Out)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}

	db, err := pagestore.Open(dbPath, nil)
	if err != nil {
		if errors.Is(err, pagestore.ErrDatabaseLocked) {
			return nil, fmt.Errorf("%s is in use (is the server running? stop it first): %w", dbPath, pagestore.ErrDatabaseLocked)
		}
		return nil, fmt.Errorf("open %s: %w", dbPath, err)
	}
	defer db.Close()
	sum = &ExportSummary{Out: cfg.Out}

	part := cfg.Out + ".part"
	os.Remove(part)
	defer func() {
		if err != nil {
			os.Remove(part)
		}
	}()
	err = guard(dbPath, func() error { return exportImage(db, dbPath, part, cfg, sum) })
	if err != nil {
		return nil, err
	}
	if err := os.Rename(part, cfg.Out); err != nil {
		return nil, err
	}
	if err := vfs.Default.SyncDir(filepath.Dir(cfg.Out)); err != nil {
		return nil, err
	}
	walDir := cfg.WALDir
	if walDir == "" {
		walDir = filepath.Join(cfg.DataDir, "member", "wal")
	}
	if last, ok := lastWALIndex(walDir); ok && last > sum.RaftIndex {
		sum.Warnings = append(sum.Warnings, fmt.Sprintf(
			"the WAL in %s has entries up to index %d, past the page store's consistent index %d; "+
				"if the server did not stop cleanly, start and stop it once so they are applied, then export again",
			walDir, last, sum.RaftIndex))
	}
	sum.Took = time.Since(start)
	return sum, nil
}

// exportImage writes the etcd snapshot.db of db's current state to part
// with etcdsnap, the writer Maintenance.Snapshot streams with, and syncs
// it.
func exportImage(db *pagestore.DB, dbPath, part string, cfg ExportConfig, sum *ExportSummary) error {
	tx, err := db.Begin(false)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	st := SnapshotStatus{}
	kc := keyCounter{live: map[string]struct{}{}}
	var bar *progress.Bar
	if cfg.Progress != nil {
		bar = progress.NewTo(cfg.Progress, "reading", db.Stats().InUseBytes, "B")
	}
	e, err := etcdsnap.PlanEtcd(context.Background(), tx, etcdsnap.EtcdOptions{Observe: func(bucket, k, v []byte) error {
		if bar != nil {
			bar.Add(int64(len(k) + len(v) + 16))
		}
		switch string(bucket) {
		case bucketKey:
			sum.Records++
			return kc.note(&st, k, v)
		case bucketLease:
			sum.Leases++
		case bucketAuthUsers:
			sum.Users++
		case bucketAuthRoles:
			sum.Roles++
		}
		return nil
	}})
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", dbPath, err)
	}
	sum.Skipped, sum.Members = e.Skipped, e.Members
	sum.RaftIndex, sum.RaftTerm = e.RaftIndex, e.RaftTerm
	sum.Keys = st.TotalKey
	sum.Revision = max(st.Revision, 1) // etcd's store starts at revision 1
	if meta, err := tx.Bucket(schema.Meta); err == nil {
		if v, err := meta.Get(metaScheduled); err == nil && len(v) >= 8 {
			sum.Revision = max(sum.Revision, int64(binary.BigEndian.Uint64(v)))
		}
	}

	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", part, err)
	}
	defer f.Close()
	var w io.Writer = f
	if cfg.Progress != nil {
		bar = progress.NewTo(cfg.Progress, "writing", e.StreamSize(), "B")
		w = &barWriter{w: f, bar: bar}
	}
	n, err := e.WriteTo(w)
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", part, err)
	}
	sum.Size, sum.SHA256 = n, fmt.Sprintf("%x", e.SHA256())
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// barWriter advances a progress bar by what it writes.
type barWriter struct {
	w   io.Writer
	bar *progress.Bar
}

func (b *barWriter) Write(p []byte) (int, error) {
	n, err := b.w.Write(p)
	b.bar.Add(int64(n))
	return n, err
}

// lastWALIndex returns the index of the last entry in the WAL, if the WAL
// can be read.
func lastWALIndex(dir string) (uint64, bool) {
	var last uint64
	_, err := wal.Iterate(nil, dir, func(_ wal.Position, rec wal.Record) error {
		if rec.Type == wal.TypeEntry {
			if e, err := wal.DecodeEntry(rec); err == nil {
				last = max(last, e.GetIndex())
			}
		}
		return nil
	})
	return last, err == nil
}

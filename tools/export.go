package tools

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
	"github.com/strata-db/strata/tools/progress"
	"github.com/strata-db/strata/version"
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

// etcdMember is a member record of etcd's "members" bucket (etcd's
// membership.Member as JSON), keyed by the id in hex.
type etcdMember struct {
	ID         uint64   `json:"id"`
	PeerURLs   []string `json:"peerURLs"`
	IsLearner  bool     `json:"isLearner,omitempty"`
	Name       string   `json:"name,omitempty"`
	ClientURLs []string `json:"clientURLs,omitempty"`
}

// etcdConfState is raftpb.ConfState as etcd stores it in meta confState.
type etcdConfState struct {
	Voters    []uint64 `json:"voters"`
	Learners  []uint64 `json:"learners,omitempty"`
	AutoLeave bool     `json:"auto_leave"`
}

// ExportEtcd writes the page store of a stopped Strata member as an etcd
// snapshot.db: a bbolt database in etcd's schema (the data buckets as they
// are, the membership converted to etcd's records, meta with
// consistent_index, term, confState and storageVersion, the cluster
// version) followed by the SHA-256 trailer 'etcdctl snapshot save'
// writes, so that etcdutl snapshot status and restore accept it.
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
	if sum.SHA256, sum.Size, err = appendSHA256(part); err != nil {
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

func exportImage(db *pagestore.DB, dbPath, part string, cfg ExportConfig, sum *ExportSummary) error {
	src := &pageSource{db: db}
	var err error
	if src.tx, err = db.Begin(false); err != nil {
		return err
	}
	defer src.tx.Rollback()
	members, removed, err := membership.Read(src.tx)
	if err != nil {
		return fmt.Errorf("%s: %w", dbPath, err)
	}
	sum.RaftIndex, sum.RaftTerm, err = mvcc.ReadConsistentIndex(src.tx)
	if err != nil {
		return fmt.Errorf("%s: %w", dbPath, err)
	}

	out, err := bolt.Open(part, 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		return fmt.Errorf("create %s: %w", part, err)
	}
	closed := false
	defer func() {
		if !closed {
			out.Close()
		}
	}()
	st := SnapshotStatus{}
	kc := keyCounter{live: map[string]struct{}{}}
	plan := copyPlan{
		bucket: func(name []byte) bool { return schema.IsDataBucket(name) },
		record: func(bucket, k, v []byte) (bool, error) {
			switch string(bucket) {
			case bucketKey:
				sum.Records++
				return true, kc.note(&st, k, v)
			case bucketLease:
				sum.Leases++
			case bucketAuthUsers:
				sum.Users++
			case bucketAuthRoles:
				sum.Roles++
			}
			return true, nil
		},
	}
	if cfg.Progress != nil {
		plan.bar = progress.NewTo(cfg.Progress, "exporting", db.Stats().InUseBytes, "B")
	}
	skipped, err := copyBuckets(src, boltSink{out}, plan)
	if plan.bar != nil {
		plan.bar.Finish()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", dbPath, err)
	}
	for _, b := range skipped {
		if b != bucketMembers && b != bucketMembersRemoved {
			sum.Skipped = append(sum.Skipped, b)
		}
	}
	sum.Keys, sum.Members = st.TotalKey, len(members)
	sum.Revision = max(st.Revision, 1) // etcd's store starts at revision 1
	if v, err := src.Get([]byte(bucketMeta), metaScheduled); err == nil && len(v) >= 8 {
		sum.Revision = max(sum.Revision, int64(binary.BigEndian.Uint64(v)))
	}

	err = out.Update(func(tx *bolt.Tx) error {
		for _, name := range schema.EtcdBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		mb, rb := tx.Bucket([]byte(bucketMembers)), tx.Bucket([]byte(bucketMembersRemoved))
		cs := etcdConfState{Voters: []uint64{}}
		for _, m := range members {
			v, err := json.Marshal(etcdMember{ID: m.ID, PeerURLs: m.PeerURLs, IsLearner: m.IsLearner, Name: m.Name, ClientURLs: m.ClientURLs})
			if err != nil {
				return err
			}
			if err := mb.Put([]byte(strconv.FormatUint(m.ID, 16)), v); err != nil {
				return err
			}
			if m.IsLearner {
				cs.Learners = append(cs.Learners, m.ID)
			} else {
				cs.Voters = append(cs.Voters, m.ID)
			}
		}
		for _, id := range removed {
			if err := rb.Put([]byte(strconv.FormatUint(id, 16)), []byte("removed")); err != nil {
				return err
			}
		}
		csJSON, err := json.Marshal(cs)
		if err != nil {
			return err
		}
		meta := tx.Bucket([]byte(bucketMeta))
		for _, kv := range []struct{ k, v []byte }{
			{metaConsistentIndex, binary.BigEndian.AppendUint64(nil, sum.RaftIndex)},
			{metaTerm, binary.BigEndian.AppendUint64(nil, sum.RaftTerm)},
			{metaConfState, csJSON},
			{metaStorageVersion, []byte(version.Cluster)},
		} {
			if err := meta.Put(kv.k, kv.v); err != nil {
				return err
			}
		}
		return tx.Bucket([]byte(bucketCluster)).Put([]byte("clusterVersion"), []byte(version.Cluster))
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", part, err)
	}
	if err := out.Sync(); err != nil {
		return err
	}
	closed = true
	return out.Close()
}

// appendSHA256 appends the SHA-256 of the file to it, as the snapshot
// stream does, and syncs it.
func appendSHA256(path string) (string, int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	s := h.Sum(nil)
	if _, err := f.WriteAt(s, n); err != nil {
		return "", 0, err
	}
	if err := f.Sync(); err != nil {
		return "", 0, err
	}
	return fmt.Sprintf("%x", s), n + int64(len(s)), f.Close()
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

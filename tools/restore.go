package tools

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/progress"
	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/schema"
	"github.com/strata-db/strata/server/config"
	"github.com/strata-db/strata/vfs"
	"github.com/strata-db/strata/wal"
)

// RestoreConfig configures Restore. The fields mean what the flags of
// etcdutl snapshot restore mean; empty fields take etcdutl's defaults
// (except the data dir, "<name>.strata").
type RestoreConfig struct {
	Snapshot                 string // the snapshot file: Strata's or etcd's snapshot.db
	DataDir                  string // default Name + ".strata"; must be new or empty
	WALDir                   string // default DataDir/member/wal; must not exist
	Name                     string // default "default"
	InitialCluster           string // default "default=http://localhost:2380"
	InitialClusterToken      string // default "etcd-cluster"
	InitialAdvertisePeerURLs string // default "http://localhost:2380"
	// SkipHashCheck skips the SHA-256 check; required for a file without
	// the trailer, such as a db file copied out of a data dir.
	SkipHashCheck bool
	// RevisionBump raises the latest revision by this much, as etcdutl's
	// --bump-revision does, so that clients watching or caching
	// revisions never see the revision go back after a restore from an
	// older snapshot. It needs MarkCompacted.
	RevisionBump uint64
	// MarkCompacted marks the bumped revision as compacted (etcdutl's
	// --mark-compacted): reads, watches and compactions below it are
	// refused as compacted, so a client's cached revision from before
	// the restore cannot read history that the restore rewrote. Only
	// with RevisionBump > 0.
	MarkCompacted bool
	// InitialMmapSize is etcdutl's --initial-memory-map-size. The page
	// store maps its own address range (pagestore.Options.MaxMapSize) and
	// needs no initial size, so it is accepted and has no effect.
	InitialMmapSize uint64
	// Progress, if set, receives progress bars.
	Progress io.Writer

	walOptions *wal.Options // tests: small segments without zero fill
}

// RestoreSummary is what Restore did.
type RestoreSummary struct {
	Snapshot        string   `json:"snapshot"`
	Format          string   `json:"format"` // "strata" or "etcd"
	HashChecked     bool     `json:"hashChecked"`
	DataDir         string   `json:"dataDir"`
	WALDir          string   `json:"walDir"`
	MemberID        string   `json:"memberID"`
	ClusterID       string   `json:"clusterID"`
	Members         int      `json:"members"`
	Revision        int64    `json:"revision"`
	CompactRevision int64    `json:"compactRevision"`
	Records         int      `json:"revisionRecords"` // records of the key bucket
	Keys            int      `json:"totalKey"`        // keys live at Revision
	Leases          int      `json:"leases"`
	AuthEnabled     bool     `json:"authEnabled"`
	Users           int      `json:"users"`
	Roles           int      `json:"roles"`
	Alarms          int      `json:"alarms"`
	DBSize          int64    `json:"dbSize"`
	RaftIndex       uint64   `json:"raftIndex"`
	RaftTerm        uint64   `json:"raftTerm"`
	Dropped         []string `json:"droppedBuckets,omitempty"` // buckets not carried over
	// RevisionBump is how much the latest revision was raised (0: not).
	RevisionBump uint64 `json:"revisionBump,omitempty"`
	// BumpMarkers counts the records without a value that an earlier
	// 'etcdutl snapshot restore --bump-revision' left in the key bucket
	// to hold the bumped revision; they are not carried over (the
	// compaction revision holds it here) since they are no key.
	BumpMarkers int           `json:"bumpMarkers,omitempty"`
	Took        time.Duration `json:"took"`
}

// ErrMarkCompacted is etcdutl's error for --bump-revision without
// --mark-compacted, or --mark-compacted without --bump-revision (its
// text names the flag by an older name, as etcdutl's does).
var ErrMarkCompacted = errors.New("--mark-compacted required if --revision-bump > 0")

// ErrSnapshotNoTrailer means the snapshot has no SHA-256 trailer and the
// hash check was not skipped.
var ErrSnapshotNoTrailer = errors.New("snapshot has no SHA-256 trailer")

func (c *RestoreConfig) defaults() {
	if c.Name == "" {
		c.Name = "default"
	}
	if c.InitialCluster == "" {
		c.InitialCluster = "default=http://localhost:2380"
	}
	if c.InitialClusterToken == "" {
		c.InitialClusterToken = "etcd-cluster"
	}
	if c.InitialAdvertisePeerURLs == "" {
		c.InitialAdvertisePeerURLs = "http://localhost:2380"
	}
	if c.DataDir == "" {
		c.DataDir = c.Name + ".strata"
	}
}

// Restore makes a new data dir from a snapshot, as etcdutl snapshot
// restore does for etcd: the snapshot's data (keys with their revisions,
// compaction state, leases, auth, alarms) is carried over, its membership
// is replaced by the one --initial-cluster describes, and a new WAL is
// written whose snapshot marker the page store's consistent index points
// at, so that strata started with the same --name and --data-dir runs
// as an existing member on the data. The input is a Strata snapshot or an
// etcd snapshot.db; either may end with the SHA-256 trailer the snapshot
// stream appends, which is checked unless SkipHashCheck is set and is
// required unless it is.
//
// Nothing is written outside the data dir and WAL dir; on failure what
// Restore created is removed again.
func Restore(cfg RestoreConfig) (sum *RestoreSummary, err error) {
	start := time.Now()
	if (cfg.RevisionBump == 0) == cfg.MarkCompacted {
		return nil, ErrMarkCompacted
	}
	if cfg.RevisionBump > math.MaxInt64/2 {
		return nil, fmt.Errorf("--bump-revision %d is too large: revisions are signed 64-bit numbers", cfg.RevisionBump)
	}
	cfg.defaults()
	scfg, err := restoreServerConfig(cfg)
	if err != nil {
		return nil, err
	}
	initial, err := scfg.InitialClusterMap()
	if err != nil {
		return nil, err
	}
	ms, err := membership.NewRestored(scfg.Name, initial, scfg.InitialClusterToken)
	if err != nil {
		return nil, err
	}
	walDir := cfg.WALDir
	if walDir == "" {
		walDir = filepath.Join(cfg.DataDir, "member", "wal")
	}

	f, err := os.Open(cfg.Snapshot)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", cfg.Snapshot)
	}
	size := fi.Size()
	if size < minSnapshotBytes {
		return nil, fmt.Errorf("%s: %d bytes is too small to be a snapshot", cfg.Snapshot, size)
	}
	hasHash := hasSHA256Trailer(size)
	if !hasHash && !cfg.SkipHashCheck {
		return nil, fmt.Errorf("%s: %w (its size, %d bytes, is not a multiple of 512 plus 32): "+
			"a file saved by 'etcdctl snapshot save' or the Snapshot RPC has one, so this one may be truncated; "+
			"for a db file copied out of a data dir, pass --skip-hash-check", cfg.Snapshot, ErrSnapshotNoTrailer, size)
	}

	undo, err := makeTargetDirs(cfg.DataDir, cfg.WALDir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			undo()
		}
	}()

	snapDir := filepath.Join(cfg.DataDir, "member", "snap")
	if err := os.MkdirAll(snapDir, 0o700); err != nil {
		return nil, err
	}
	sum = &RestoreSummary{Snapshot: cfg.Snapshot, DataDir: cfg.DataDir, WALDir: walDir,
		MemberID: fmt.Sprintf("%x", ms.Self), ClusterID: fmt.Sprintf("%x", ms.Cluster), Members: len(ms.Members)}

	// 1. Copy the database image out of the snapshot, checking its hash.
	body := size
	if hasHash {
		body -= sha256.Size
	}
	tmp := filepath.Join(snapDir, "db.restore.tmp")
	got, err := extractImage(f, body, tmp, cfg)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp)
	if hasHash {
		trailer := make([]byte, sha256.Size)
		if _, err := f.ReadAt(trailer, body); err != nil {
			return nil, fmt.Errorf("%s: read SHA-256 trailer at offset %d: %w", cfg.Snapshot, body, err)
		}
		if !cfg.SkipHashCheck {
			if !bytes.Equal(got, trailer) {
				return nil, fmt.Errorf("%s: %w (the trailer at offset %d says %x, the %d bytes before it hash to %x): the file is damaged or truncated",
					cfg.Snapshot, ErrSnapshotIntegrity, body, trailer, body, got)
			}
			sum.HashChecked = true
		}
	}
	head := make([]byte, 64)
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Snapshot, err)
	}
	sum.Format = snapshotFormat(head)
	if err := checkImageSize(cfg.Snapshot, sum.Format, head, body); err != nil {
		return nil, err
	}

	// 2. Convert it into a new page store, then give it the new
	// membership, WAL and consistent index.
	dbPath := filepath.Join(snapDir, "db")
	err = guard(cfg.Snapshot, func() error {
		return convertImage(tmp, dbPath, body, walDir, ms, cfg, sum)
	})
	if err != nil {
		return nil, err
	}
	if err := os.Remove(tmp); err != nil {
		return nil, err
	}
	if err := vfs.Default.SyncDir(snapDir); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(dbPath); err == nil {
		sum.DBSize = fi.Size()
	}
	sum.Took = time.Since(start)
	return sum, nil
}

// restoreServerConfig checks the cluster flags as strata itself would at
// bootstrap, with etcd's messages.
func restoreServerConfig(cfg RestoreConfig) (*config.Config, error) {
	args := []string{
		"--name=" + cfg.Name,
		"--data-dir=" + cfg.DataDir,
		"--initial-cluster=" + cfg.InitialCluster,
		"--initial-cluster-token=" + cfg.InitialClusterToken,
		"--initial-advertise-peer-urls=" + cfg.InitialAdvertisePeerURLs,
		"--initial-cluster-state=new",
	}
	if cfg.WALDir != "" {
		args = append(args, "--wal-dir="+cfg.WALDir)
	}
	c, err := config.Parse(args, nil, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("invalid cluster flags: %w", err)
	}
	return c, nil
}

// makeTargetDirs refuses a data dir that exists and is not empty, and a
// WAL dir (given explicitly) that exists, as etcdutl does. It returns
// a function that removes what the restore created.
func makeTargetDirs(dataDir, walDir string) (undo func(), err error) {
	dataExisted := false
	if ents, err := os.ReadDir(dataDir); err == nil {
		if len(ents) > 0 {
			return nil, fmt.Errorf("data dir %s exists and is not empty; restore into a new or empty directory", dataDir)
		}
		dataExisted = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("data dir %s cannot be read: %w", dataDir, err)
	}
	if walDir != "" {
		if _, err := os.Lstat(walDir); err == nil {
			return nil, fmt.Errorf("WAL dir %s exists; restore needs a new one", walDir)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("WAL dir %s: %w", walDir, err)
		}
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	return func() {
		if dataExisted {
			os.RemoveAll(filepath.Join(dataDir, "member"))
		} else {
			os.RemoveAll(dataDir)
		}
		if walDir != "" {
			os.RemoveAll(walDir)
		}
	}, nil
}

// extractImage copies the first n bytes of the snapshot (the database
// image) to path and returns their SHA-256.
func extractImage(f *os.File, n int64, path string, cfg RestoreConfig) ([]byte, error) {
	out, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	var bar *progress.Bar
	if cfg.Progress != nil {
		bar = progress.NewTo(cfg.Progress, "reading snapshot", n, "B")
	}
	err = copyHashing(out, io.NewSectionReader(f, 0, n), n, h, bar)
	if bar != nil {
		bar.Finish()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("%s: copy to %s: %w", cfg.Snapshot, path, err)
	}
	return h.Sum(nil), nil
}

// checkImageSize rejects an image that is not a whole number of pages,
// which is what a truncated file without a trailer looks like.
func checkImageSize(path, format string, head []byte, n int64) error {
	var ps int64
	switch format {
	case "etcd", "strata":
		ps = int64(schema.PageSize(schema.Format(format), head))
	default:
		return fmt.Errorf("%s is neither a Strata snapshot nor an etcd snapshot.db: "+
			"no page-store magic at offset %d and no bbolt magic at offset %d", path,
			schema.MagicOffset(schema.FormatStrata), schema.MagicOffset(schema.FormatEtcd))
	}
	if ps < 512 || ps > 1<<16 || ps&(ps-1) != 0 {
		return fmt.Errorf("%s: the %s database header at offset 0 names a page size of %d bytes, which is invalid: the file is damaged", path, format, ps)
	}
	if n%ps != 0 || n < 4*ps {
		return fmt.Errorf("%s: a database in %s format is a whole number of %d-byte pages (at least 4), but this one is %d bytes: the file is truncated",
			path, format, ps, n)
	}
	return nil
}

// restoreScan validates and counts what a restore copies.
type restoreScan struct {
	st        SnapshotStatus
	kc        keyCounter
	records   int
	sum       *RestoreSummary
	scheduled int64
	finished  int64
	// latest is the highest revision of the key bucket, bump markers
	// included: what etcdutl's --bump-revision adds to.
	latest int64
}

func (r *restoreScan) record(bucket, k, v []byte) (bool, error) {
	switch string(bucket) {
	case bucketKey:
		if !validRevKey(k) {
			return false, fmt.Errorf("malformed revision key (want 8-byte main, '_', 8-byte sub, optional 't')")
		}
		r.latest = max(r.latest, int64(binary.BigEndian.Uint64(k)))
		if len(v) == 0 {
			// The marker etcdutl's --bump-revision writes: no key.
			r.sum.BumpMarkers++
			return false, nil
		}
		if err := r.kc.note(&r.st, k, v); err != nil {
			return false, err
		}
		r.records++
	case bucketMeta:
		switch {
		case bytes.Equal(k, metaConsistentIndex), bytes.Equal(k, metaTerm):
			return false, nil // replaced by the new raft position
		case bytes.Equal(k, metaConfState), bytes.Equal(k, metaStorageVersion):
			return false, nil // etcd's own bookkeeping, rewritten by export-etcd
		case bytes.Equal(k, metaScheduled), bytes.Equal(k, metaFinished):
			if len(v) < 8 {
				return false, fmt.Errorf("meta %s is %d bytes, want a revision", k, len(v))
			}
			rev := int64(binary.BigEndian.Uint64(v))
			if bytes.Equal(k, metaScheduled) {
				r.scheduled = rev
			} else {
				r.finished = rev
			}
		}
	case bucketLease:
		if len(k) != 8 {
			return false, fmt.Errorf("lease key is %d bytes, want 8", len(k))
		}
		r.sum.Leases++
	case bucketAuth:
		if string(k) == "authEnabled" {
			r.sum.AuthEnabled = len(v) == 1 && v[0] == 1
		}
	case bucketAuthUsers:
		var u authpb.User
		if err := proto.Unmarshal(v, &u); err != nil {
			return false, fmt.Errorf("user %q: %w", k, err)
		}
		r.sum.Users++
	case bucketAuthRoles:
		var ro authpb.Role
		if err := proto.Unmarshal(v, &ro); err != nil {
			return false, fmt.Errorf("role %q: %w", k, err)
		}
		r.sum.Roles++
	case bucketAlarm:
		r.sum.Alarms++
	}
	return true, nil
}

func validRevKey(k []byte) bool {
	switch len(k) {
	case 17:
		return k[8] == '_'
	case 18:
		return k[8] == '_' && k[17] == 't'
	}
	return false
}

// convertImage copies the database image at src into a new page store at
// dst, then writes the new membership, WAL and consistent index.
func convertImage(src, dst string, imageSize int64, walDir string, ms *membership.Restored, cfg RestoreConfig, sum *RestoreSummary) error {
	var in kvSource
	var err error
	if sum.Format == "etcd" {
		in, err = openBoltSource(src)
	} else {
		in, err = openPageSource(src)
	}
	if err != nil {
		return fmt.Errorf("%s: open the %s database: %w", cfg.Snapshot, sum.Format, err)
	}
	defer in.Close()
	if in.Size() > imageSize {
		return fmt.Errorf("%s: the database needs %d bytes but the file holds %d: the file is truncated", cfg.Snapshot, in.Size(), imageSize)
	}
	out, err := pagestore.Open(dst, &pagestore.Options{NoSync: true})
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			out.Close()
		}
	}()

	scan := &restoreScan{kc: keyCounter{live: map[string]struct{}{}}, sum: sum}
	plan := copyPlan{record: scan.record}
	if sum.Format == "etcd" {
		plan.bucket = func(name []byte) bool { return schema.IsDataBucket(name) }
	} else {
		// Every bucket of a Strata snapshot is Strata's own, but the
		// membership is replaced.
		plan.bucket = func(name []byte) bool {
			return string(name) != bucketMembers && string(name) != bucketMembersRemoved
		}
	}
	if cfg.Progress != nil {
		plan.bar = progress.NewTo(cfg.Progress, "restoring", in.Size(), "B")
	}
	skipped, err := copyBuckets(in, pageSink{out}, plan)
	if plan.bar != nil {
		plan.bar.Finish()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.Snapshot, err)
	}
	for _, b := range skipped {
		// The membership is replaced; etcd's cluster bucket holds only
		// its cluster version, which Strata reports by itself.
		if b != bucketMembers && b != bucketMembersRemoved && b != bucketCluster {
			sum.Dropped = append(sum.Dropped, b)
		}
	}
	sum.Records, sum.Keys = scan.records, scan.st.TotalKey
	sum.Revision = max(scan.st.Revision, scan.scheduled, 1)
	sum.CompactRevision = scan.finished
	// etcdutl's --bump-revision: the new latest revision is the key
	// bucket's latest plus the bump, scheduled for compaction. etcd also
	// writes a record without a value at it; Strata's store needs none,
	// since it takes a scheduled compaction revision as its revision
	// when higher, and resumes the compaction when it opens, which is
	// what etcd does with the scheduled revision on start.
	var scheduleAt int64
	if cfg.RevisionBump > 0 && cfg.MarkCompacted {
		scheduleAt = scan.latest + int64(cfg.RevisionBump)
		sum.Revision, sum.CompactRevision, sum.RevisionBump = scheduleAt, scheduleAt, cfg.RevisionBump
	}

	index, term, err := raft.CreateRestoredWAL(walDir, ms.Self, ms.Cluster, ms.Peers(), cfg.walOptions)
	if err != nil {
		return err
	}
	sum.RaftIndex, sum.RaftTerm = index, term
	err = out.Update(func(tx *pagestore.Tx) error {
		// Buckets every Strata member has, even if the snapshot lacked them.
		for _, name := range []string{bucketKey, bucketMeta, bucketLease} {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return err
			}
		}
		if err := ms.Write(tx); err != nil {
			return err
		}
		if scheduleAt > 0 {
			meta, err := tx.Bucket(schema.Meta)
			if err != nil {
				return err
			}
			// A revision key, as etcd writes the compaction revisions.
			k := binary.BigEndian.AppendUint64(nil, uint64(scheduleAt))
			k = append(k, '_')
			k = binary.BigEndian.AppendUint64(k, 0)
			if err := meta.Put(metaScheduled, k); err != nil {
				return err
			}
		}
		return mvcc.SetConsistentIndex(tx, index, term)
	})
	if err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	closed = true
	return out.Close()
}

package tools

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/versionpb"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
	"github.com/strata-db/strata/wal"
)

// The storage version of a stopped member, as 'etcdutl migrate' changes
// it for etcd: the meta bucket's storageVersion, which a member writes
// when the cluster version changes (server/clusterversion.go) and which
// tells the oldest release that can read the data dir. Strata's page
// store holds nothing a 3.6 member would read differently, so, as etcd's
// own migration from 3.7 to 3.6, a migration is the version alone; the
// checks and messages are etcdutl's.

// Storage versions etcd 3.7 knows how to migrate between, and the oldest
// etcdutl accepts as a target.
var (
	storageV35 = semver{Major: 3, Minor: 5}
	storageV36 = semver{Major: 3, Minor: 6}
	storageV37 = semver{Major: 3, Minor: 7}
)

// MigrateConfig configures Migrate.
type MigrateConfig struct {
	DataDir string // the member's data dir (member/snap/db)
	// WALDir is the member's --wal-dir (default DataDir/member/wal): a
	// downgrade is refused while the WAL holds entries an older release
	// would not understand, as etcdutl refuses it.
	WALDir string
	// TargetVersion is "X.Y", at least "3.5".
	TargetVersion string
	// Force sets the version even when the migration is refused.
	Force bool
	// LockTimeout bounds the wait for a running server to let go of the
	// db (0: forever).
	LockTimeout time.Duration
	// Log receives etcd's log messages of the migration, one a line.
	Log io.Writer
}

// MigrateResult is what Migrate did.
type MigrateResult struct {
	DB     string `json:"db"`
	From   string `json:"from"`   // the storage version found
	To     string `json:"to"`     // the storage version now ("" when cleared, for 3.5)
	Forced bool   `json:"forced"` // set by --force after the migration was refused
	// UpToDate is true when the version already was the target.
	UpToDate bool `json:"upToDate"`
}

// ErrBadTargetVersion wraps the --target-version errors (etcdutl exits
// with its bad-arguments status on them).
var ErrBadTargetVersion = errors.New("bad target version")

type badTarget struct{ msg string }

func (e badTarget) Error() string        { return e.msg }
func (e badTarget) Is(target error) bool { return target == ErrBadTargetVersion }

// parseMigrateTarget checks --target-version as etcdutl does.
func parseMigrateTarget(s string) (semver, error) {
	if strings.Count(s, ".") != 1 {
		return semver{}, badTarget{fmt.Sprintf("wrong target version format, expected \"X.Y\", got %q", s)}
	}
	v, err := parseSemverErr(s + ".0")
	if err != nil {
		return semver{}, badTarget{fmt.Sprintf("failed to parse target version: %v", err)}
	}
	if v.less(storageV35) {
		return semver{}, badTarget{fmt.Sprintf("target version %q not supported. Minimal \"3.5\"", v.majorMinor())}
	}
	return v, nil
}

// CheckMigrateTarget validates a --target-version without touching any
// file, with etcdutl's messages (errors.Is ErrBadTargetVersion).
func CheckMigrateTarget(s string) error {
	_, err := parseMigrateTarget(s)
	return err
}

// Migrate sets the storage version of a stopped Strata member to the
// target, as 'etcdutl migrate' does for an etcd member: nothing to do
// when it already is the target; a downgrade is refused while the WAL
// (after its last snapshot) holds entries of a newer release; versions
// etcd 3.7 cannot migrate to are refused; Force sets (or, for 3.5,
// clears) the version anyway.
func Migrate(cfg MigrateConfig) (*MigrateResult, error) {
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}
	target, err := parseMigrateTarget(cfg.TargetVersion)
	if err != nil {
		return nil, err
	}
	dbPath, err := DataDirDB(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	db, err := openPageStore(dbPath, nil, cfg.LockTimeout)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	res := &MigrateResult{DB: dbPath}
	var current semver
	err = db.View(func(tx *pagestore.Tx) error {
		var err error
		current, err = detectStorageVersion(tx)
		return err
	})
	if err != nil {
		logf("failed to detect storage version. Please make sure you are using data dir from etcd v3.5 and older")
		return nil, err
	}
	res.From = current.String()
	if current == target {
		logf("storage version up-to-date storage-version=%s", current.majorMinor())
		res.To, res.UpToDate = current.String(), true
		return res, nil
	}
	walDir := cfg.WALDir
	if walDir == "" {
		walDir = filepath.Join(cfg.DataDir, "member", "wal")
	}
	walMin, err := walMinimalVersion(walDir)
	if err != nil {
		logf("Failed to finalize config error=%q", err.Error())
		return nil, err
	}
	steps, err := migrationPlan(current, target)
	if err == nil && target.less(current) && walMin != nil && target.less(*walMin) {
		err = fmt.Errorf("cannot downgrade storage, WAL contains newer entries, as the target version (%s) is lower than the version (%s) detected from WAL logs",
			target, walMin)
	}
	to := ""
	if err == nil {
		for _, s := range steps {
			logf("updated storage version new-storage-version=%s", s)
		}
		if !target.less(storageV36) {
			to = target.minor().String()
		}
	} else {
		if !cfg.Force {
			return nil, err
		}
		logf("normal migrate failed, trying with force error=%q", err.Error())
		res.Forced = true
		if target.less(storageV36) {
			logf("forcefully cleared storage version")
		} else {
			to = target.minor().String()
			logf("forcefully set storage version storage-version=%s", target.majorMinor())
		}
	}
	err = db.Update(func(tx *pagestore.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(schema.Meta)
		if err != nil {
			return err
		}
		if to == "" {
			// A 3.5 member has no storage version.
			return meta.Delete(schema.MetaStorageVersion)
		}
		return meta.Put(schema.MetaStorageVersion, []byte(to))
	})
	if err != nil {
		return nil, fmt.Errorf("%s: write the storage version: %w", dbPath, err)
	}
	if err := db.Sync(); err != nil {
		return nil, err
	}
	res.To = to
	return res, nil
}

// detectStorageVersion is etcd's: the stored storage version, else 3.5
// for a data dir whose meta has a term (every 3.5 member's has), else an
// error.
func detectStorageVersion(tx *pagestore.Tx) (semver, error) {
	meta, err := tx.Bucket(schema.Meta)
	if err != nil && !isBucketNotFound(err) {
		return semver{}, err
	}
	if meta == nil {
		return semver{}, errors.New("missing term information")
	}
	v, err := meta.Get(schema.MetaStorageVersion)
	if err != nil {
		return semver{}, err
	}
	if sv, ok := parseSemver(string(v)); ok {
		return sv, nil
	}
	t, err := meta.Get(schema.MetaTerm)
	if err != nil {
		return semver{}, err
	}
	if len(t) != 8 || binary.BigEndian.Uint64(t) == 0 {
		return semver{}, errors.New("missing term information")
	}
	return storageV35, nil
}

// migrationPlan returns the versions an etcd 3.7 migration passes
// through from current to target (minor by minor), or etcd's error when
// one step is not one etcd 3.7 knows.
func migrationPlan(current, target semver) ([]semver, error) {
	cur, tgt := current.minor(), target.minor()
	if cur.Major != tgt.Major {
		return nil, errors.New("cannot create migration plan: changing major storage version is not supported")
	}
	known := func(v semver) bool { return v == storageV36 || v == storageV37 }
	var steps []semver
	for cur != tgt {
		next := cur
		if cur.Minor < tgt.Minor {
			next.Minor++
			if !known(next) {
				return nil, fmt.Errorf("cannot create migration plan: version %q is not supported", next.String())
			}
		} else {
			if !known(cur) {
				return nil, fmt.Errorf("cannot create migration plan: version %q is not supported", cur.String())
			}
			next.Minor--
		}
		steps = append(steps, next)
		cur = next
	}
	return steps, nil
}

// walMinimalVersion is the oldest etcd release that understands every
// entry of the WAL after its last snapshot, as etcd computes it from the
// version annotations of etcd's protos (nil: no entry needs one).
func walMinimalVersion(walDir string) (*semver, error) {
	var snapIndex uint64
	entries := map[uint64]*raftpb.Entry{}
	_, err := wal.Iterate(nil, walDir, func(pos wal.Position, rec wal.Record) error {
		switch rec.Type {
		case wal.TypeSnapshot:
			s, err := wal.DecodeSnapshot(rec)
			if err != nil {
				return fmt.Errorf("%s offset %d: %w", pos.File, pos.Offset, err)
			}
			snapIndex = max(snapIndex, s.Index)
		case wal.TypeEntry:
			e, err := wal.DecodeEntry(rec)
			if err != nil {
				return fmt.Errorf("%s offset %d: %w", pos.File, pos.Offset, err)
			}
			entries[e.GetIndex()] = e // a later record of an index replaces it
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("failed to read wal %s: %w", walDir, err)
	}
	var minimal *semver
	for idx, e := range entries {
		if idx <= snapIndex {
			continue
		}
		if err := visitEntryVersions(e, func(v semver) {
			if minimal == nil || minimal.less(v) {
				minimal = &v
			}
		}); err != nil {
			return nil, fmt.Errorf("WAL %s, entry %d: %w", walDir, idx, err)
		}
	}
	return minimal, nil
}

// visitEntryVersions calls visit with each etcd version an entry's
// content needs: the versions annotated on the messages, fields, enums
// and enum values it uses, the version a downgrade test request names,
// 3.0 for a conf change and 3.4 for a conf change v2.
func visitEntryVersions(e *raftpb.Entry, visit func(semver)) error {
	if err := visitMessageVersions(e.ProtoReflect(), visit); err != nil {
		return err
	}
	switch e.GetType() {
	case raftpb.EntryConfChange:
		var cc raftpb.ConfChange
		if proto.Unmarshal(e.GetData(), &cc) == nil {
			visit(semver{Major: 3, Minor: 0})
		}
		return nil
	case raftpb.EntryConfChangeV2:
		var cc raftpb.ConfChangeV2
		if proto.Unmarshal(e.GetData(), &cc) == nil {
			visit(semver{Major: 3, Minor: 4})
		}
		return nil
	}
	var req pb.InternalRaftRequest
	if err := schema.DecodeRequest(e.GetData(), &req); err != nil {
		return err
	}
	if t := req.GetDowngradeVersionTest(); t != nil {
		v, err := parseSemverErr(t.GetVer())
		if err != nil {
			return err
		}
		visit(v)
	}
	return visitMessageVersions(req.ProtoReflect(), visit)
}

// visitMessageVersions visits the version annotations of a message, of
// each field that is set, and of the messages and enum values in those
// fields (repeated and map fields by their annotation only, as etcd).
func visitMessageVersions(m protoreflect.Message, visit func(semver)) error {
	md := m.Descriptor()
	if err := visitAnnotation(md.Options(), versionpb.E_EtcdVersionMsg, visit); err != nil {
		return err
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if err = visitAnnotation(fd.Options(), versionpb.E_EtcdVersionField, visit); err != nil {
			return false
		}
		if fd.IsList() || fd.IsMap() {
			return true
		}
		switch fd.Kind() {
		case protoreflect.MessageKind, protoreflect.GroupKind:
			err = visitMessageVersions(v.Message(), visit)
		case protoreflect.EnumKind:
			ed := fd.Enum()
			if err = visitAnnotation(ed.Options(), versionpb.E_EtcdVersionEnum, visit); err != nil {
				return false
			}
			ev := ed.Values().ByNumber(v.Enum())
			if ev == nil {
				err = fmt.Errorf("%s: no value %d", ed.FullName(), v.Enum())
				return false
			}
			err = visitAnnotation(ev.Options(), versionpb.E_EtcdVersionEnumValue, visit)
		}
		return err == nil
	})
	return err
}

// visitAnnotation visits the version an etcd version option names
// ("3.5" means 3.5.0).
func visitAnnotation(opts proto.Message, ext protoreflect.ExtensionType, visit func(semver)) error {
	if opts == nil || !proto.HasExtension(opts, ext) {
		return nil
	}
	s, _ := proto.GetExtension(opts, ext).(string)
	if s == "" {
		return nil
	}
	if strings.Count(s, ".") == 1 {
		s += ".0"
	}
	v, err := parseSemverErr(s)
	if err != nil {
		return fmt.Errorf("version annotation %q: %w", s, err)
	}
	visit(v)
	return nil
}

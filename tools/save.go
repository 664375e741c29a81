package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/strata-db/strata/vfs"
)

// SaveSnapshot streams a member's snapshot (Maintenance.Snapshot: etcd's
// snapshot.db with its SHA-256 trailer, as 'etcdctl snapshot save' writes
// it) into path, durably and whole or not at all: the stream goes to
// path.part, which is fsync'd, renamed to path, and the directory
// fsync'd. The saved file is then verified as 'snapshot status' verifies
// it (the trailer and every page); a file that fails is removed. progress,
// if set, is called with the bytes received and the total the server
// announced.
func SaveSnapshot(ctx context.Context, cc grpc.ClientConnInterface, path string, progress func(done, total int64)) (*SnapshotStatus, error) {
	part := path + ".part"
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*SnapshotStatus, error) {
		f.Close()
		os.Remove(part)
		return nil, err
	}
	stream, err := pb.NewMaintenanceClient(cc).Snapshot(ctx, &pb.SnapshotRequest{})
	if err != nil {
		return fail(fmt.Errorf("snapshot request: %w", err))
	}
	var done int64
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(fmt.Errorf("snapshot stream after %d bytes: %w", done, err))
		}
		if _, err := f.Write(resp.Blob); err != nil {
			return fail(fmt.Errorf("write %s: %w", part, err))
		}
		done += int64(len(resp.Blob))
		if progress != nil {
			progress(done, done+int64(resp.RemainingBytes))
		}
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("sync %s: %w", part, err))
	}
	if err := f.Close(); err != nil {
		os.Remove(part)
		return nil, fmt.Errorf("close %s: %w", part, err)
	}
	if err := os.Rename(part, path); err != nil {
		os.Remove(part)
		return nil, err
	}
	if err := vfs.Default.SyncDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("sync the directory of %s: %w", path, err)
	}
	st, err := Status(path)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("the saved snapshot %s does not verify, removed: %w", path, err)
	}
	return st, nil
}

// Scheduled snapshots (stratautl snapshot save --dir) are named
// BackupPrefix + UTC time + BackupSuffix, so names sort by age.
const (
	BackupPrefix = "strata-snapshot-"
	BackupSuffix = ".db"
)

// BackupName is the file name of a scheduled snapshot taken at t.
func BackupName(t time.Time) string {
	return BackupPrefix + t.UTC().Format("20060102T150405.000Z") + BackupSuffix
}

// Backups lists the scheduled snapshots in dir, oldest first.
func Backups(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); e.Type().IsRegular() && strings.HasPrefix(n, BackupPrefix) && strings.HasSuffix(n, BackupSuffix) {
			out = append(out, filepath.Join(dir, n))
		}
	}
	sort.Strings(out)
	return out, nil
}

// PruneBackups removes the oldest scheduled snapshots in dir until keep
// remain, and any partial file a stopped save left; it returns the
// snapshots kept.
func PruneBackups(dir string, keep int) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, BackupPrefix) && strings.HasSuffix(n, BackupSuffix+".part") {
			os.Remove(filepath.Join(dir, n))
		}
	}
	all, err := Backups(dir)
	if err != nil {
		return nil, err
	}
	if keep <= 0 || len(all) <= keep {
		return all, nil
	}
	for _, p := range all[:len(all)-keep] {
		if err := os.Remove(p); err != nil {
			return nil, err
		}
	}
	return all[len(all)-keep:], vfs.Default.SyncDir(dir)
}

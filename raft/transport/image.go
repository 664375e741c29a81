package transport

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"

	"github.com/strata-db/strata/vfs"
)

// encodingZstdXXH64 is Strata's snapshot payload encoding (wire format,
// never change; a new encoding gets a new name and feature token):
//
//	zstd( image || xxhash64(image) as 8 bytes big-endian )
//
// with the image's size in X-Strata-Snapshot-Size. The receiver decodes
// exactly that many bytes, checks the hash, and requires the zstd stream
// to end right after it, so a truncated, extended or corrupted transfer
// is refused before the image is renamed into place.
const encodingZstdXXH64 = "zstd-xxh64"

// ErrSnapshotChecksum: a compressed image did not match its checksum.
var ErrSnapshotChecksum = errors.New("transport: snapshot image checksum mismatch")

// encodeImage writes image (size bytes) to w in encodingZstdXXH64.
func encodeImage(w io.Writer, image io.Reader, size int64) error {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return err
	}
	h := xxhash.New()
	n, err := io.Copy(io.MultiWriter(zw, h), image)
	if err == nil && n != size {
		err = fmt.Errorf("%w: read %d bytes, announced %d", ErrSnapshotSize, n, size)
	}
	if err != nil {
		zw.Close()
		return err
	}
	var sum [8]byte
	binary.BigEndian.PutUint64(sum[:], h.Sum64())
	if _, err := zw.Write(sum[:]); err != nil {
		zw.Close()
		return err
	}
	return zw.Close()
}

// decodeImage reads an encodingZstdXXH64 payload of a size-byte image from
// r into w and verifies it.
func decodeImage(w io.Writer, r io.Reader, size int64) (int64, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(64<<20))
	if err != nil {
		return 0, err
	}
	defer zr.Close()
	h := xxhash.New()
	n, err := io.CopyN(io.MultiWriter(w, h), zr, size)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w: image ended after %d of %d bytes", ErrSnapshotSize, n, size)
		}
		return n, err
	}
	var sum [8]byte
	if _, err := io.ReadFull(zr, sum[:]); err != nil {
		return n, fmt.Errorf("%w: checksum missing after %d bytes: %v", ErrSnapshotChecksum, n, err)
	}
	if got, want := h.Sum64(), binary.BigEndian.Uint64(sum[:]); got != want {
		return n, fmt.Errorf("%w: image hashes to %016x, sender sent %016x", ErrSnapshotChecksum, got, want)
	}
	var one [1]byte
	if k, err := io.ReadFull(zr, one[:]); k > 0 {
		return n, fmt.Errorf("%w: data after the checksum", ErrSnapshotSize)
	} else if err != io.EOF {
		return n, fmt.Errorf("transport: snapshot stream does not end after the checksum: %w", err)
	}
	return n, nil
}

// saveImage writes an image durably to path: fill writes it to a new
// temporary file in path's directory, which is fsynced, renamed to path
// (replacing an older copy), and the directory fsynced. On any error the
// temporary file is removed and path is untouched. It returns the bytes
// fill wrote. A save that succeeds is timed in m (nil: not timed).
func saveImage(fs vfs.FS, path string, fill func(io.Writer) (int64, error), m *metrics) (n int64, err error) {
	start := time.Now()
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return 0, err
	}
	tmp := path + ".tmp-" + hex.EncodeToString(rnd[:])
	f, err := fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("transport: create snapshot file: %w", err)
	}
	defer func() {
		if err != nil {
			if f != nil {
				f.Close()
			}
			fs.Remove(tmp)
			err = fmt.Errorf("transport: snapshot file %s: %w", tmp, err)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if n, err = fill(bw); err != nil {
		return n, err
	}
	if err = bw.Flush(); err != nil {
		return n, err
	}
	syncStart := time.Now()
	if err = f.Sync(); err != nil {
		return n, err
	}
	synced := time.Since(syncStart)
	err = f.Close()
	f = nil
	if err != nil {
		return n, err
	}
	if err = fs.Rename(tmp, path); err != nil {
		return n, err
	}
	// From here tmp is gone; a failure leaves path in place but maybe not
	// durable, and is reported so raft is not told about it.
	if err = fs.SyncDir(filepath.Dir(path)); err != nil {
		return n, fmt.Errorf("renamed to %s, directory not synced: %w", path, err)
	}
	if m != nil {
		m.snapDBFsync.Observe(synced.Seconds())
		m.snapDBSave.Observe(time.Since(start).Seconds())
	}
	return n, nil
}

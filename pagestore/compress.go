package pagestore

import (
	"fmt"
	"math/bits"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// Value compression. Bucket.Put stores a value of compressMin bytes or
// more compressed when that saves at least an eighth of it (and
// compressGain bytes): with S2 below zstdMin bytes, where decoding speed
// matters more than the last bytes, and with zstd from zstdMin up, where
// the better ratio saves whole overflow pages. The leaf element's flags say
// which (elemFlagS2, elemFlagZstd); keys, bucket headers and values that
// do not shrink are stored as they are. Readers get the value back
// decoded, in memory of its own, so it outlives the transaction; only a
// stored-as-is value points into the mapping.
//
// Why not below compressMin: every read of a compressed value pays the
// decode and, outside GetBuf, an allocation. For a 256-byte value of one
// letter, read by serializable ranges from 1000 clients, that was 1.3 us
// more of the member's CPU per read (17.98 against 16.63 us, six pairs,
// bench/RESULTS.md) to save 230 bytes; from 512 bytes up the saving is
// larger and the decode is a smaller share of the read.
//
// A compressed value is covered by its page's checksum like any other
// byte. If a value whose page checksum matches still fails to decode (a
// writer's bug, not a disk error) the read returns a *PageError naming the
// file, the page and the value's offset, and Tx.Check reports it.
const (
	compressMin  = 512
	compressGain = 16
	zstdMin      = 32 << 10
)

var (
	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
	zstdDec  *zstd.Decoder
	zstdErr  error
)

// zstdCodecs builds the shared zstd encoder and decoder on first use, so a
// database that never holds a value of zstdMin bytes or more never pays
// for their tables. Both are safe for concurrent EncodeAll and DecodeAll.
func zstdCodecs() (*zstd.Encoder, *zstd.Decoder, error) {
	zstdOnce.Do(func() {
		zstdEnc, zstdErr = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		if zstdErr != nil {
			return
		}
		zstdDec, zstdErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxValueSize))
	})
	return zstdEnc, zstdDec, zstdErr
}

// compressValue returns what Put stores for v and its element flags. The
// returned slice may be the writer's scratch buffer: the caller copies it
// before the next call.
func (db *DB) compressValue(v []byte) ([]byte, uint32) {
	if db.opts.NoCompression || len(v) < compressMin || looksRandom(v) {
		return v, 0
	}
	var out []byte
	var flag uint32
	if len(v) < zstdMin {
		n := s2.MaxEncodedLen(len(v))
		if n < 0 {
			return v, 0
		}
		if cap(db.cbuf) < n {
			db.cbuf = make([]byte, n)
		}
		out, flag = s2.Encode(db.cbuf[:n], v), elemFlagS2
	} else {
		enc, _, err := zstdCodecs()
		if err != nil {
			return v, 0
		}
		out, flag = enc.EncodeAll(v, db.cbuf[:0]), elemFlagZstd
		db.cbuf = out[:0]
		if cap(db.cbuf) > 4<<20 {
			db.cbuf = nil // out stays valid for the caller's copy; do not keep it
		}
	}
	if len(v)-len(out) < max(len(v)/8, compressGain) {
		return v, 0
	}
	return out, flag
}

// looksRandom reports whether v is probably random, encrypted or already
// compressed, so that trying to compress it would only cost time: about
// 0.5 us for a few hundred random bytes with S2, where a member spends
// 35 us in all on a put from 1000 clients. It counts the distinct bytes
// in 128 bytes sampled from four places: random bytes show about 100 of
// the 256 values there, text and protobuf far fewer. A value that repeats
// a random block is missed and stored as it is, which costs space, never
// correctness.
func looksRandom(v []byte) bool {
	const chunk, limit = 32, 80
	var set [4]uint64
	for i := 0; i < 4; i++ {
		off := min(i*len(v)/4, len(v)-chunk)
		for _, c := range v[off : off+chunk] {
			set[c>>6] |= 1 << (c & 63)
		}
	}
	n := bits.OnesCount64(set[0]) + bits.OnesCount64(set[1]) + bits.OnesCount64(set[2]) + bits.OnesCount64(set[3])
	return n > limit
}

// inflate returns the stored value v with element flags f as the
// application wrote it, decoded into memory of its own.
func inflate(f uint32, v []byte) ([]byte, error) {
	out, _, err := inflateInto(f, v, nil)
	return out, err
}

// inflateInto is inflate decoding into buf when it is large enough (else
// into new memory); it also returns the buffer to pass next time.
func inflateInto(f uint32, v, buf []byte) (out, next []byte, err error) {
	switch f & elemFlagsCompressed {
	case elemFlagS2:
		n, err := s2.DecodedLen(v)
		if err != nil || n > MaxValueSize {
			return nil, buf, fmt.Errorf("S2 value: length %d: %v", n, err)
		}
		if cap(buf) < n {
			c := n
			if buf != nil {
				c += n / 4 // room for the next, slightly larger value
			}
			buf = make([]byte, n, c)
		}
		out, err := s2.Decode(buf[:n], v)
		if err != nil {
			return nil, buf, fmt.Errorf("S2 value: %v", err)
		}
		return out, buf, nil
	case elemFlagZstd:
		_, dec, err := zstdCodecs()
		if err != nil {
			return nil, buf, err
		}
		out, err := dec.DecodeAll(v, buf[:0])
		if err != nil {
			return nil, buf, fmt.Errorf("zstd value: %v", err)
		}
		if out == nil {
			out = []byte{} // an empty value is non-nil, as Get promises
		}
		return out, out[:0], nil
	case 0:
		return v, buf, nil
	default:
		return nil, buf, fmt.Errorf("value flags %#x name two codecs", f)
	}
}

// inflatePage is inflate for element i of page p, with an error that
// names the file, the page and the value's byte offset.
func (db *DB) inflatePage(p []byte, i int, f uint32, v []byte) ([]byte, error) {
	out, err := inflate(f, v)
	if err != nil {
		id := pgID(p)
		pos := leafValuePos(p, i)
		return nil, corruptPage(db.path, id, db.pageSize, "element %d: value at file offset %d: %v",
			i, int64(id)*int64(db.pageSize)+int64(pos), err)
	}
	return out, nil
}

// inflateNode is inflate for element i of the writer's node n.
func (db *DB) inflateNode(n *node, i int) ([]byte, error) {
	in := &n.inodes[i]
	out, err := inflate(in.flags, in.value)
	if err != nil {
		return nil, corruptPage(db.path, n.pgid, db.pageSize, "element %d (in the writer's copy of the page): %v", i, err)
	}
	return out, nil
}

package wal

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/protobuf/proto"
)

// scanTranscript scans data as the segment info through a window of chunk
// bytes and describes everything the scan delivered and returned.
func scanTranscript(data []byte, info segmentInfo, last bool, chunk int) string {
	var b strings.Builder
	src := newSegmentSource(bytes.NewReader(data), info.path, int64(len(data)), chunk, nil)
	res, err := scanSegment(src, info, last, func(off int64, rec Record) error {
		fmt.Fprintf(&b, "%d %s batch %d len %d sum %016x\n", off, rec.Type, rec.Batch, len(rec.Data), xxhash.Sum64(rec.Data))
		return nil
	})
	fmt.Fprintf(&b, "tail %d lastBatch %d", res.tail, res.lastBatch)
	if res.torn != nil {
		fmt.Fprintf(&b, " torn at %d: %s", res.torn.offset, res.torn.reason)
	}
	if err != nil {
		fmt.Fprintf(&b, " error: %v", err)
	}
	return b.String()
}

// TestScanWindowSizes scans segments through windows from one byte to
// larger than the segment and requires the same records, tail and verdict
// from each: records that cross a window's end (units of many records,
// compressed entries, records longer than the window), a clean end in
// zeros, a torn tail, a tear followed by a durable later batch, and junk
// after the end of a completed segment.
func TestScanWindowSizes(t *testing.T) {
	const segSize = 256 << 10
	build := func() []byte {
		seg := segmentHeader{seq: 3, firstIndex: 11, metadata: []byte("member metadata")}
		data := appendRecord(nil, typeSegment, 1, seg.marshal(), -1, true)
		batch := uint64(2)
		for i := uint64(11); i < 60; i++ {
			// Units of one to four entries, some of them compressible
			// and long enough to be compressed, then the hard state.
			for j := uint64(0); j <= i%4; j++ {
				e := mkEntry(i, 2, 50+int(i*j*97)%9000)
				if i%3 == 0 {
					e.Data = bytes.Repeat([]byte("k8s"), 2000+int(i))
				}
				enc, err := proto.Marshal(e)
				if err != nil {
					t.Fatal(err)
				}
				data = appendRecord(data, TypeEntry, batch, enc, 4096, false)
			}
			st, err := proto.Marshal(mkState(2, i))
			if err != nil {
				t.Fatal(err)
			}
			data = appendRecord(data, TypeState, batch, st, -1, true)
			batch++
		}
		return append(data, make([]byte, segSize-len(data))...)
	}
	info := segmentInfo{seq: 3, firstIndex: 11, path: "0000000000000003-000000000000000b.wal"}
	clean := build()
	end := bytes.LastIndexFunc(clean, func(r rune) bool { return r != 0 }) + 1
	cases := map[string]func(b []byte) []byte{
		"clean": func(b []byte) []byte { return b },
		"torn": func(b []byte) []byte {
			b[end-40] ^= 0xff // the last unit's hard state
			return b
		},
		"unit cut short": func(b []byte) []byte {
			rec, _ := decodeRecord(b[len(b)-segSize:]) // the segment header
			off := rec.StoredSize
			for { // find the last unit's first record
				r, err := decodeRecord(b[off:])
				if err != nil {
					t.Fatal(err)
				}
				if off+r.StoredSize+headerSize > end-64 {
					break
				}
				off += r.StoredSize
			}
			clear(b[off:end]) // the unit's closing hard state
			return b
		},
		"durable record after a bad one": func(b []byte) []byte {
			// A later batch's record far past a damaged one: corruption.
			b[end/2] ^= 0x01
			later := appendRecord(nil, TypeState, 1000, []byte{8, 1}, -1, true)
			copy(b[end+8192:], later)
			return b
		},
		"junk after the end": func(b []byte) []byte {
			b[segSize-3] = 7
			return b
		},
	}
	for name, damage := range cases {
		data := damage(build())
		for _, last := range []bool{true, false} {
			whole := scanTranscript(data, info, last, len(data))
			if !strings.Contains(whole, "entry") {
				t.Fatalf("%s: the scan delivered no entry:\n%s", name, whole)
			}
			for _, chunk := range []int{1, 7, 24, 100, 4096, 5000, 64 << 10} {
				if got := scanTranscript(data, info, last, chunk); got != whole {
					t.Fatalf("%s, last=%v: a %d-byte window reads\n%s\nthe whole segment reads\n%s", name, last, chunk, got, whole)
				}
			}
			t.Logf("%s, last=%v: %s", name, last, whole[strings.LastIndex(whole, "\n")+1:])
		}
	}
}

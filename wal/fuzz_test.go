package wal

import (
	"encoding/binary"
	"testing"
)

// FuzzDecodeRecord feeds arbitrary bytes to the record decoder and to the
// segment scanner. Neither may panic, allocate beyond MaxRecordSize, or
// accept a record that does not re-encode to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	valid := appendRecord(nil, TypeEntry, 7, []byte("hello, wal"), -1, true)
	big := make([]byte, 9000)
	for i := range big {
		big[i] = byte(i % 7)
	}
	compressed := appendRecord(nil, TypeEntry, 9, big, 4096, true)
	f.Add(valid)
	f.Add(compressed)
	f.Add(valid[:len(valid)-3])           // truncated payload
	f.Add(valid[:12])                     // truncated header
	f.Add(compressed[:len(compressed)/2]) // truncated compressed payload
	huge := append([]byte(nil), valid...) // length field far past the data
	binary.LittleEndian.PutUint32(huge, 0xfffffff0)
	f.Add(huge)
	limit := append([]byte(nil), valid...) // just above MaxRecordSize
	binary.LittleEndian.PutUint32(limit, MaxRecordSize+1)
	f.Add(limit)
	for _, bit := range []int{0, 33, 70, 130, 200} { // flipped bits
		b := append([]byte(nil), valid...)
		b[bit/8] ^= 1 << (bit % 8)
		f.Add(b)
	}
	seg := segmentHeader{seq: 0, firstIndex: 0, metadata: []byte("m")}
	f.Add(append(appendRecord(nil, typeSegment, 0, seg.marshal(), -1, true), valid...))

	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := decodeRecord(data)
		if err == nil {
			if rec.StoredSize > len(data) || len(rec.Data) > MaxRecordSize {
				t.Fatalf("accepted record claims %d bytes of %d, payload %d", rec.StoredSize, len(data), len(rec.Data))
			}
			if !rec.Compressed {
				again := appendRecord(nil, rec.Type, rec.Batch, rec.Data, -1, rec.unitEnd)
				if string(again) != string(data[:rec.StoredSize]) {
					t.Fatalf("accepted record does not re-encode identically")
				}
			}
		}
		// The scanner, as last and as middle segment, must only return
		// errors, never panic.
		info := segmentInfo{seq: 0, firstIndex: 0, path: "fuzz.wal"}
		for _, last := range []bool{true, false} {
			_, _ = scanSegment(info.path, data, info, last, func(int64, Record) error { return nil })
		}
	})
}

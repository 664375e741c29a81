package wal

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/s2"
)

// Wire format: never change these values. A WAL written by one version of
// Strata must be readable by every later one; new record types and flags
// may be added, existing ones never renumbered or reinterpreted.
const (
	// recordAlign is the alignment of every record start. The first header
	// word (length, type, flags) is 8-byte aligned and so never straddles a
	// 512-byte sector: a torn write cannot leave half a length behind.
	recordAlign = 8
	// headerSize is the fixed record header: length u32, type u8, flags u8,
	// reserved u16, batch u64, checksum u64.
	headerSize = 24
	// MaxRecordSize is the largest payload a record may carry, stored or
	// decompressed. A length above it is corruption, never an allocation.
	MaxRecordSize = 64 << 20

	// segmentMagic opens the payload of every segment's header record.
	segmentMagic = "STRATAWL"
	// formatVersion is written in each segment header.
	formatVersion = 1
)

// RecordType says what a record's payload holds.
type RecordType uint8

// Record types (wire format, never change).
const (
	// typeSegment is the first record of every segment: magic, format
	// version, sequence number, first raft index and the WAL's metadata.
	typeSegment RecordType = 1
	// TypeEntry holds one marshaled raftpb.Entry.
	TypeEntry RecordType = 2
	// TypeState holds a marshaled raftpb.HardState.
	TypeState RecordType = 3
	// TypeSnapshot holds a snapshot marker: term u64, index u64, then a
	// marshaled raftpb.ConfState.
	TypeSnapshot RecordType = 4
)

// Record flags (wire format, never change).
const (
	// flagS2 marks a payload compressed with S2 block compression.
	flagS2 uint8 = 1 << 0
	// flagUnitEnd marks the last record of a unit: the records of one Save
	// (entries, then the hard state) or one standalone record. Recovery
	// returns only whole units.
	flagUnitEnd uint8 = 1 << 1

	flagsKnown = flagS2 | flagUnitEnd
)

func (t RecordType) String() string {
	switch t {
	case typeSegment:
		return "segment"
	case TypeEntry:
		return "entry"
	case TypeState:
		return "state"
	case TypeSnapshot:
		return "snapshot"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Record is one decoded record.
type Record struct {
	Type RecordType
	// Batch is the group-commit batch that wrote the record. Batches are
	// numbered in write order, and batch b+1 is written only after batch b
	// has been fdatasync'd; recovery uses that to tell a torn tail from
	// corruption.
	Batch uint64
	// Data is the payload, decompressed. It aliases the decode buffer
	// unless the record was compressed.
	Data []byte
	// StoredSize is the record's size on disk, header and padding included.
	StoredSize int
	// Compressed reports whether the payload was stored compressed.
	Compressed bool
	// unitEnd reports whether the record closes its unit.
	unitEnd bool
}

// Decode errors. They are wrapped with the file and offset by the reader.
var (
	// errZeroHeader means the record starts with an all-zero length word:
	// the end of the written part of a preallocated segment.
	errZeroHeader = errors.New("zero header")
	// errShort means fewer bytes remain than the header or length needs.
	errShort = errors.New("record extends past end of data")
	// errBadRecord covers every checksum, length and field check.
	errBadRecord = errors.New("invalid record")
)

func padded(n int) int { return (n + recordAlign - 1) &^ (recordAlign - 1) }

// appendRecord encodes a record onto dst and returns the extended slice.
// Payloads of at least compressAt bytes are S2-compressed when that saves
// space (compressAt <= 0 disables compression). The caller guarantees
// len(data) <= MaxRecordSize.
func appendRecord(dst []byte, typ RecordType, batch uint64, data []byte, compressAt int, unitEnd bool) []byte {
	var flags uint8
	if unitEnd {
		flags |= flagUnitEnd
	}
	payload := data
	if compressAt > 0 && len(data) >= compressAt {
		c := s2.Encode(nil, data)
		if len(c) < len(data)-len(data)/8 {
			payload, flags = c, flags|flagS2
		}
	}
	start := len(dst)
	total := headerSize + padded(len(payload))
	dst = append(dst, make([]byte, total)...)
	h := dst[start : start+headerSize]
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(payload)))
	h[4] = uint8(typ)
	h[5] = flags
	binary.LittleEndian.PutUint64(h[8:16], batch)
	copy(dst[start+headerSize:], payload)
	binary.LittleEndian.PutUint64(h[16:24], recordChecksum(h[:16], payload))
	return dst
}

func recordChecksum(head, payload []byte) uint64 {
	d := xxhash.New()
	d.Write(head)
	d.Write(payload)
	return d.Sum64()
}

// decodeRecord decodes the record at the start of buf. It never allocates
// more than MaxRecordSize and never trusts a length before checking it
// against both MaxRecordSize and the bytes actually present.
func decodeRecord(buf []byte) (Record, error) {
	if len(buf) < 8 {
		if allZero(buf) {
			return Record{}, errZeroHeader
		}
		return Record{}, errShort
	}
	if binary.LittleEndian.Uint64(buf[0:8]) == 0 {
		return Record{}, errZeroHeader
	}
	if len(buf) < headerSize {
		return Record{}, errShort
	}
	n := int(binary.LittleEndian.Uint32(buf[0:4]))
	typ := RecordType(buf[4])
	flags := buf[5]
	if n > MaxRecordSize {
		return Record{}, fmt.Errorf("%w: length %d exceeds limit %d", errBadRecord, n, MaxRecordSize)
	}
	total := headerSize + padded(n)
	if total > len(buf) {
		return Record{}, errShort
	}
	payload := buf[headerSize : headerSize+n]
	if !allZero(buf[headerSize+n : total]) {
		return Record{}, fmt.Errorf("%w: nonzero padding", errBadRecord)
	}
	want := binary.LittleEndian.Uint64(buf[16:24])
	if got := recordChecksum(buf[:16], payload); got != want {
		return Record{}, fmt.Errorf("%w: checksum mismatch (stored %016x, computed %016x)", errBadRecord, want, got)
	}
	// The checksum covers the header, so the fields below were written by
	// us; still validate them so a future-version file fails loudly.
	if typ < typeSegment || typ > TypeSnapshot {
		return Record{}, fmt.Errorf("%w: unknown record type %d", errBadRecord, typ)
	}
	if flags&^flagsKnown != 0 || buf[6] != 0 || buf[7] != 0 {
		return Record{}, fmt.Errorf("%w: unknown flags %#x", errBadRecord, flags)
	}
	rec := Record{
		Type:       typ,
		Batch:      binary.LittleEndian.Uint64(buf[8:16]),
		Data:       payload,
		StoredSize: total,
		unitEnd:    flags&flagUnitEnd != 0,
	}
	if flags&flagS2 != 0 {
		dn, err := s2.DecodedLen(payload)
		if err != nil {
			return Record{}, fmt.Errorf("%w: compressed payload: %v", errBadRecord, err)
		}
		if dn > MaxRecordSize {
			return Record{}, fmt.Errorf("%w: decompressed length %d exceeds limit %d", errBadRecord, dn, MaxRecordSize)
		}
		out, err := s2.Decode(make([]byte, dn), payload)
		if err != nil {
			return Record{}, fmt.Errorf("%w: compressed payload: %v", errBadRecord, err)
		}
		rec.Data, rec.Compressed = out, true
	}
	return rec, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

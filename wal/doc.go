// Package wal is Strata's write-ahead log: the durability point of every
// acknowledged write. A raft entry is acknowledged only after the WAL has
// fdatasync'd it.
//
// # Directory layout
//
//	member/wal/
//	  LOCK                                 flock'd by the open WAL
//	  0000000000000000-0000000000000000.wal  segment seq 0, first index 0
//	  0000000000000001-00000000000a1b2c.wal  segment seq 1, first index 0xa1b2c
//	  prealloc-N.wal.tmp                   the next segment, prepared once the
//	                                       current one is three quarters full
//
// A segment's name is its sequence number and the raft index of the first
// entry it was opened for, both as 16 hex digits. Sequence numbers have no
// gaps. A segment is cut at SegmentSize bytes (64 MiB). Its disk space is
// allocated and, by default, zero-filled by a background goroutine before
// the writer needs it. A new log's first segment starts with an eighth of
// that (8 MiB) and grows by as much whenever the writer comes within half
// of it of the allocated end, so a new log takes about what it holds plus
// 8 MiB. Each later segment is prepared whole once the current one is
// three quarters full, so a member that has been writing has up to a
// segment of disk reserved ahead of it.
//
// # Record format
//
// A segment is a sequence of records, each starting at an 8-byte aligned
// offset, followed by zeros up to the end of the file:
//
//	0       4      5       6          8                16               24
//	+-------+------+-------+----------+----------------+----------------+
//	| len   | type | flags | reserved | batch          | xxhash64       |
//	| u32   | u8   | u8    | u16 = 0  | u64            | u64            |
//	+-------+------+-------+----------+----------------+----------------+
//	| payload (len bytes)                  | zero padding to 8 bytes    |
//	+--------------------------------------+----------------------------+
//
// All integers are little-endian. The checksum covers bytes 0..16 of the
// header and the stored payload. Types: 1 segment header (always the first
// record), 2 raft entry, 3 hard state, 4 snapshot marker. Flags: bit 0, the
// payload is S2-compressed (entries of 4 KiB or more); bit 1, the record
// ends a unit. A unit is what one Save writes (its entries, then the hard
// state) or a single standalone record; recovery returns whole units only.
// The constants in record.go are the wire format and never change.
//
// The segment header payload is "STRATAWL", format version u32, reserved
// u32, sequence u64, first index u64, then the WAL's metadata. Each segment
// also starts with the hard state current when it was cut, so reading can
// begin at any segment.
//
// # Reading
//
// A member restarts from its newest snapshot marker. LastSnapshot finds it
// by reading the segments newest first, stopping at the first that holds
// one; Open then reads from the segment holding the snapshot's index to
// the end. Segments older than that are neither read nor validated: what
// they hold precedes the snapshot, and they wait only to be purged. Each
// segment is read through a window of a megabyte (scan.go) rather than
// into one buffer of its size, and entries at or below the snapshot's
// index are checked but not decoded. So a restart reads about one or two
// segments, whatever the number of segments kept.
//
// # Group commit
//
// Appenders encode their records into a shared batch under a mutex and
// wait on a future. One syncer goroutine takes the whole batch, writes it
// with one pwrite per segment touched and issues one fdatasync; then it
// releases the waiters in the order they enqueued. The syncer never waits
// for company: if work is queued it writes at once, so a lone writer pays
// one write and one fdatasync, and batches grow only while a previous sync
// is in flight. Only the syncer syncs, so at most one fdatasync is ever in
// flight.
//
// # Crash safety
//
// Assumptions about the disk: a write of an aligned 8-byte word inside a
// sector is atomic (a header's first word is never torn); fdatasync returns
// only when the data written before it, and the file size, are durable;
// writes after the last completed fdatasync may be lost or land partially
// and in any order; a rename and a create are durable once the directory
// is fsync'd.
//
// The argument:
//
//  1. A waiter is released only after the fdatasync that followed the
//     write of its records returned success. So every acknowledged record
//     is on disk.
//  2. A new segment is written with its header and hard state, fdatasync'd,
//     renamed into place, and the directory fsync'd, all before any record
//     is written into it; and the previous segment is fdatasync'd before the
//     new one is installed. So every segment but the last is complete and
//     durable, and a torn write can only be in the last segment.
//  3. Growth of a segment writes zeros (after fallocate) only past the
//     end of its records, and the writer waits for a piece being filled
//     before it writes over it, so growth never overwrites a record. At a
//     cut, the segment's growth is stopped (a piece in progress is waited
//     for) before the segment's final fdatasync, so nothing writes to a
//     segment once the next one is installed. A crash during
//     growth leaves zeros, unwritten (zero-reading) blocks or a shorter
//     file after the last record: all read as the end of the log. Growth
//     fdatasyncs through its own file handle, so a writeback error it
//     sees is still reported to the writer's next fdatasync (Linux
//     reports it once to each open file description).
//  4. The batch number in each record advances only past a batch that was
//     fdatasync'd. In the last segment, bytes after the last whole unit are
//     a torn tail if nothing durable follows them: Open truncates them,
//     fdatasyncs and logs a warning. If a valid record from a batch two past
//     the last good one follows, the bad bytes had been durable: that is
//     corruption, and Open refuses.
//  5. Anywhere else, a record that fails its checksum, a length above
//     MaxRecordSize (never allocated), an entry index that skips ahead, or
//     nonzero bytes after the end of a completed segment make Open fail with
//     an error matching ErrCorrupt that names the file and the offset.
//     Records are never skipped.
//  6. A failed write or fdatasync (ENOSPC, EIO) fails every waiter of the
//     batch and every later append with ErrFailed wrapping an *IOError
//     that names the file. The syncer writes nothing more, so whatever
//     partial bytes reached the file are a torn tail for the next Open. On
//     Linux a failed fdatasync may have dropped dirty pages, so retrying
//     it would be unsafe; reopening rereads the file from disk instead.
//     The WAL does not log the failure: its owner does, once (the server
//     exits with one fatal line, and its supervisor restarts it).
//  7. Open fdatasyncs the last segment before appending, so entries it
//     returns (which may have been only in the page cache of a process
//     that was killed) are durable before raft treats them as persisted.
//
// A LOCK file in the directory is flock'd while the WAL is open, so two
// processes cannot append to one log. Readers (Verify, Iterate) take no
// lock and change nothing.
package wal

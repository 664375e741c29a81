package transport

import (
	"encoding/binary"
	"fmt"
	"io"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The two stream encodings (wire format, never change). Integers are
// big-endian; a "message" is a raftpb.Message marshaled by
// google.golang.org/protobuf, which go.etcd.io/raft/v3 v3.7 generates, so
// Strata and etcd 3.7 put the same bytes on the wire.
//
// Message stream, and the envelope before a snapshot payload:
//
//	+----------------+-------------------+
//	| length  uint64 | message  (length) |   repeated
//	+----------------+-------------------+
//
// MsgApp v2 stream: one type byte, then
//
//	0 link heartbeat   (nothing else)
//	1 app entries      count uint64, count x (length uint64, entry),
//	                   commit uint64
//	2 full message     length uint64, message
//
// Type 1 is a MsgApp that continues the previous one on the same stream:
// its term equals its log term and the previous MsgApp's term, and its
// index is the index of the last entry sent. Both ends track (term,
// index): the encoder to know when it may use type 1, the decoder to
// rebuild the message (from = the stream's peer, to = the local member).
const (
	msgAppV2Heartbeat byte = 0
	msgAppV2Entries   byte = 1
	msgAppV2Message   byte = 2
)

// Size limits for decoding: a length prefix above them is an error,
// never an allocation.
const (
	// maxStreamMessage bounds one message on a stream or the pipeline
	// (etcd uses 512 MiB for stream messages).
	maxStreamMessage = 512 << 20
	// maxSnapshotEnvelope bounds the MsgSnap before a snapshot payload
	// (metadata and the small Snapshot.Data; etcd uses 64 MiB).
	maxSnapshotEnvelope = 64 << 20
)

// linkHeartbeat is the streams' keep-alive: a MsgHeartbeat with no from
// and no to, which raft never sends, so receivers drop it.
var linkHeartbeat = &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum()}

func isLinkHeartbeat(m *raftpb.Message) bool {
	return m.GetType() == raftpb.MsgHeartbeat && m.GetFrom() == 0 && m.GetTo() == 0
}

// encoder writes messages to a stream and returns the bytes written.
type encoder interface {
	encode(m *raftpb.Message) (int, error)
}

// decoder reads the next message from a stream and its size on the wire.
type decoder interface {
	decode() (*raftpb.Message, int, error)
}

// messageEncoder writes the message stream's length-prefixed frames.
type messageEncoder struct {
	w   io.Writer
	buf []byte // reused between messages
}

func (e *messageEncoder) encode(m *raftpb.Message) (int, error) {
	var err error
	e.buf = append(e.buf[:0], 0, 0, 0, 0, 0, 0, 0, 0)
	e.buf, err = proto.MarshalOptions{}.MarshalAppend(e.buf, m)
	if err != nil {
		return 0, fmt.Errorf("transport: marshal %s: %w", m.GetType(), err)
	}
	binary.BigEndian.PutUint64(e.buf, uint64(len(e.buf)-8))
	n, err := e.w.Write(e.buf)
	if len(e.buf) > 1<<20 {
		e.buf = nil // do not pin a large snapshot envelope
	}
	return n, err
}

// messageDecoder reads length-prefixed frames, refusing lengths above
// limit.
type messageDecoder struct {
	r     io.Reader
	limit uint64
	hdr   [8]byte
	buf   frameBuf
}

// frameBuf is a decoder's read buffer, reused from frame to frame: the
// protobuf decoder copies every byte field out of it, so nothing decoded
// points into it. Frames larger than frameBufKeep get a buffer of their
// own, so one huge append does not pin its size for the stream's life.
type frameBuf struct{ b []byte }

const frameBufKeep = 64 << 10

// frameGrowStep bounds what a large frame's buffer grows by before the
// bytes to fill it have arrived.
const frameGrowStep = 4 << 20

// read reads the next n bytes of r. A frame larger than frameBufKeep gets
// a buffer of its own, allocated at once up to frameGrowStep (a real
// frame, up to a few MiB, costs one allocation) and grown by at most that
// step as the data arrives, so a length prefix (up to the limit) that no
// data follows costs no allocation of its size.
func (f *frameBuf) read(r io.Reader, n uint64) ([]byte, error) {
	if n > frameBufKeep {
		b := make([]byte, 0, min(n, frameGrowStep))
		for uint64(len(b)) < n {
			k := min(n-uint64(len(b)), frameGrowStep)
			b = append(b, make([]byte, k)...)
			if _, err := io.ReadFull(r, b[uint64(len(b))-k:]); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	if uint64(cap(f.b)) < n {
		f.b = make([]byte, max(n, 4<<10))
	}
	_, err := io.ReadFull(r, f.b[:n])
	return f.b[:n], err
}

func (d *messageDecoder) decode() (*raftpb.Message, int, error) {
	if _, err := io.ReadFull(d.r, d.hdr[:]); err != nil {
		return nil, 0, err
	}
	n := binary.BigEndian.Uint64(d.hdr[:])
	if n > d.limit {
		return nil, 8, fmt.Errorf("%w: length %d, limit %d", ErrMessageTooLarge, n, d.limit)
	}
	buf, err := d.buf.read(d.r, n)
	if err != nil {
		return nil, 8, unexpectedEOF(err)
	}
	m := &raftpb.Message{}
	if err := proto.Unmarshal(buf, m); err != nil {
		return nil, 8 + int(n), fmt.Errorf("transport: bad raft message (%d bytes): %w", n, err)
	}
	return m, 8 + int(n), nil
}

// unexpectedEOF turns an EOF inside a frame into io.ErrUnexpectedEOF, so
// only a clean end between frames reads as the end of a stream.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// msgAppV2Encoder writes the MsgApp v2 stream.
type msgAppV2Encoder struct {
	w           io.Writer
	term, index uint64 // of the last MsgApp written
	buf         []byte
}

func (e *msgAppV2Encoder) encode(m *raftpb.Message) (int, error) {
	var err error
	b := e.buf[:0]
	switch {
	case isLinkHeartbeat(m):
		b = append(b, msgAppV2Heartbeat)
	case e.index == m.GetIndex() && e.term == m.GetLogTerm() && m.GetLogTerm() == m.GetTerm():
		b = append(b, msgAppV2Entries)
		b = binary.BigEndian.AppendUint64(b, uint64(len(m.Entries)))
		for _, ent := range m.Entries {
			at := len(b)
			b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
			if b, err = (proto.MarshalOptions{}).MarshalAppend(b, ent); err != nil {
				return 0, fmt.Errorf("transport: marshal entry %d: %w", ent.GetIndex(), err)
			}
			binary.BigEndian.PutUint64(b[at:], uint64(len(b)-at-8))
			e.index++
		}
		b = binary.BigEndian.AppendUint64(b, m.GetCommit())
	default:
		b = append(b, msgAppV2Message, 0, 0, 0, 0, 0, 0, 0, 0)
		if b, err = (proto.MarshalOptions{}).MarshalAppend(b, m); err != nil {
			return 0, fmt.Errorf("transport: marshal %s: %w", m.GetType(), err)
		}
		binary.BigEndian.PutUint64(b[1:], uint64(len(b)-9))
		e.term, e.index = m.GetTerm(), m.GetIndex()
		if n := len(m.Entries); n > 0 {
			e.index = m.Entries[n-1].GetIndex()
		}
	}
	e.buf = b
	n, err := e.w.Write(b)
	if cap(e.buf) > 4<<20 {
		e.buf = nil
	}
	return n, err
}

// msgAppV2Decoder reads the MsgApp v2 stream from peer remote to local.
type msgAppV2Decoder struct {
	r             io.Reader
	local, remote uint64
	limit         uint64
	term, index   uint64
	hdr           [8]byte
	buf           frameBuf
}

func (d *msgAppV2Decoder) u64() (uint64, error) {
	if _, err := io.ReadFull(d.r, d.hdr[:]); err != nil {
		return 0, unexpectedEOF(err)
	}
	return binary.BigEndian.Uint64(d.hdr[:]), nil
}

func (d *msgAppV2Decoder) decode() (*raftpb.Message, int, error) {
	var typ [1]byte
	if _, err := io.ReadFull(d.r, typ[:]); err != nil {
		return nil, 0, err
	}
	switch typ[0] {
	case msgAppV2Heartbeat:
		return &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum()}, 1, nil
	case msgAppV2Entries:
		return d.decodeEntries()
	case msgAppV2Message:
		n, err := d.u64()
		if err != nil {
			return nil, 1, err
		}
		if n > d.limit {
			return nil, 9, fmt.Errorf("%w: length %d, limit %d", ErrMessageTooLarge, n, d.limit)
		}
		buf, err := d.buf.read(d.r, n)
		if err != nil {
			return nil, 9, unexpectedEOF(err)
		}
		m := &raftpb.Message{}
		if err := proto.Unmarshal(buf, m); err != nil {
			return nil, 9 + int(n), fmt.Errorf("transport: bad raft message (%d bytes): %w", n, err)
		}
		d.term, d.index = m.GetTerm(), m.GetIndex()
		if k := len(m.Entries); k > 0 {
			d.index = m.Entries[k-1].GetIndex()
		}
		return m, 9 + int(n), nil
	default:
		return nil, 1, fmt.Errorf("transport: failed to parse type %d in msgappv2 stream", typ[0])
	}
}

func (d *msgAppV2Decoder) decodeEntries() (*raftpb.Message, int, error) {
	size := 1
	count, err := d.u64()
	if err != nil {
		return nil, size, err
	}
	size += 8
	// Each entry costs at least its 8-byte length on the wire, so a
	// count above limit/8 cannot be honest; entries are appended as they
	// arrive rather than preallocated from the count.
	if count > d.limit/8 {
		return nil, size, fmt.Errorf("%w: %d entries", ErrMessageTooLarge, count)
	}
	m := &raftpb.Message{
		Type:    raftpb.MsgApp.Enum(),
		From:    proto.Uint64(d.remote),
		To:      proto.Uint64(d.local),
		Term:    proto.Uint64(d.term),
		LogTerm: proto.Uint64(d.term),
		Index:   proto.Uint64(d.index),
		Entries: make([]*raftpb.Entry, 0, min(count, 1024)),
	}
	total := uint64(0)
	for i := uint64(0); i < count; i++ {
		n, err := d.u64()
		if err != nil {
			return nil, size, err
		}
		size += 8
		total += n
		if n > d.limit || total > d.limit {
			return nil, size, fmt.Errorf("%w: entries of %d bytes, limit %d", ErrMessageTooLarge, total, d.limit)
		}
		buf, err := d.buf.read(d.r, n)
		if err != nil {
			return nil, size, unexpectedEOF(err)
		}
		size += int(n)
		ent := &raftpb.Entry{}
		if err := proto.Unmarshal(buf, ent); err != nil {
			return nil, size, fmt.Errorf("transport: bad raft entry (%d bytes): %w", n, err)
		}
		m.Entries = append(m.Entries, ent)
		d.index++
	}
	commit, err := d.u64()
	if err != nil {
		return nil, size, err
	}
	size += 8
	m.Commit = proto.Uint64(commit)
	return m, size, nil
}

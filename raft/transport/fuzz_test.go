package transport

import (
	"bytes"
	"encoding/binary"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The peer protocol's decoders take bytes from the network: whatever a
// peer (or anything that reaches the peer port) sends, they must return an
// error or a message, never panic, and never allocate past their limit.

// fuzzSeedMessages are a few valid frames of each stream kind.
func fuzzSeedMessages() []*raftpb.Message {
	ent := &raftpb.Entry{Term: proto.Uint64(3), Index: proto.Uint64(8), Type: raftpb.EntryNormal.Enum(), Data: []byte("payload")}
	return []*raftpb.Message{
		{Type: raftpb.MsgApp.Enum(), To: proto.Uint64(2), From: proto.Uint64(1), Term: proto.Uint64(3), LogTerm: proto.Uint64(3),
			Index: proto.Uint64(7), Commit: proto.Uint64(7), Entries: []*raftpb.Entry{ent}},
		{Type: raftpb.MsgHeartbeat.Enum(), To: proto.Uint64(2), From: proto.Uint64(1), Term: proto.Uint64(3), Commit: proto.Uint64(7)},
		{Type: raftpb.MsgVote.Enum(), To: proto.Uint64(2), From: proto.Uint64(1), Term: proto.Uint64(4), LogTerm: proto.Uint64(3), Index: proto.Uint64(8)},
	}
}

// FuzzMessageStream feeds arbitrary bytes to the message stream decoder
// (length-prefixed raft messages), frame after frame until an error.
func FuzzMessageStream(f *testing.F) {
	var buf bytes.Buffer
	enc := &messageEncoder{w: &buf}
	for _, m := range fuzzSeedMessages() {
		if _, err := enc.encode(m); err != nil {
			f.Fatal(err)
		}
	}
	valid := buf.Bytes()
	f.Add(valid)
	f.Add(valid[:len(valid)-5])
	huge := append([]byte(nil), valid...)
	binary.BigEndian.PutUint64(huge, 1<<62) // a length far past the limit
	f.Add(huge)
	f.Fuzz(func(t *testing.T, in []byte) {
		dec := &messageDecoder{r: bytes.NewReader(in), limit: maxStreamMessage}
		for i := 0; i < 1000; i++ {
			m, n, err := dec.decode()
			if err != nil {
				if n > len(in) {
					t.Fatalf("decoder claims %d bytes of a %d-byte input", n, len(in))
				}
				return
			}
			if m == nil {
				t.Fatal("no message and no error")
			}
		}
	})
}

// FuzzMsgAppV2Stream feeds arbitrary bytes to the MsgApp v2 decoder, whose
// frames carry entries, link heartbeats and whole messages.
func FuzzMsgAppV2Stream(f *testing.F) {
	var buf bytes.Buffer
	enc := &msgAppV2Encoder{w: &buf}
	for _, m := range fuzzSeedMessages() {
		if _, err := enc.encode(m); err != nil {
			f.Fatal(err)
		}
	}
	valid := buf.Bytes()
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	for _, b := range []byte{0, 1, 2, 3, 0xff} { // frame types, known and not
		f.Add(append([]byte{b}, valid[1:]...))
	}
	long := append([]byte{2}, make([]byte, 24)...) // entries frame with a huge count
	binary.BigEndian.PutUint64(long[17:], 1<<60)
	f.Add(long)
	f.Fuzz(func(t *testing.T, in []byte) {
		dec := &msgAppV2Decoder{r: bytes.NewReader(in), local: 2, remote: 1, limit: maxStreamMessage}
		for i := 0; i < 1000; i++ {
			m, _, err := dec.decode()
			if err != nil {
				return
			}
			if m == nil {
				t.Fatal("no message and no error")
			}
		}
	})
}

package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"strconv"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/testseed"
)

// seed returns the test's random seed (testseed: STRATA_SEED replays).
func seed(t testing.TB) uint64 {
	t.Helper()
	return testseed.Seed(t)
}

var allTypes = []raftpb.MessageType{
	raftpb.MsgHup, raftpb.MsgProp, raftpb.MsgApp, raftpb.MsgAppResp, raftpb.MsgVote, raftpb.MsgVoteResp,
	raftpb.MsgSnap, raftpb.MsgHeartbeat, raftpb.MsgHeartbeatResp, raftpb.MsgTimeoutNow, raftpb.MsgReadIndex,
	raftpb.MsgReadIndexResp, raftpb.MsgPreVote, raftpb.MsgPreVoteResp, raftpb.MsgTransferLeader,
}

// randomMessage is any message a raft member sends, with random fields.
func randomMessage(rng *rand.Rand, from, to uint64) *raftpb.Message {
	typ := allTypes[rng.IntN(len(allTypes))]
	m := msg(typ, from, to, rng.Uint64N(100), rng.Uint64N(1e6))
	m.LogTerm = proto.Uint64(rng.Uint64N(100))
	m.Commit = proto.Uint64(rng.Uint64N(1e6))
	if rng.IntN(2) == 0 {
		m.Entries = entries(m.GetIndex()+1, rng.IntN(5), rng.IntN(300), m.GetTerm())
	}
	// raft's MsgApp carries only these fields, which is what lets the
	// MsgApp v2 stream drop the rest; other types get the others.
	if typ != raftpb.MsgApp && rng.IntN(4) == 0 {
		m.Reject, m.RejectHint = proto.Bool(true), proto.Uint64(rng.Uint64N(100))
	}
	if typ != raftpb.MsgApp && rng.IntN(4) == 0 {
		m.Context = []byte("ctx" + strconv.Itoa(rng.IntN(1000)))
	}
	if typ == raftpb.MsgSnap {
		m.Snapshot = &raftpb.Snapshot{Data: []byte("membership"), Metadata: &raftpb.SnapshotMetadata{
			Index: proto.Uint64(rng.Uint64N(1e6)), Term: proto.Uint64(rng.Uint64N(100)),
			ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}},
		}}
	}
	return m
}

func TestMessageCodecRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 1))
	var buf bytes.Buffer
	enc := &messageEncoder{w: &buf}
	var sent []*raftpb.Message
	wire := 0
	for range 2000 {
		m := randomMessage(rng, 1, 2)
		if rng.IntN(10) == 0 {
			m = linkHeartbeat
		}
		n, err := enc.encode(m)
		if err != nil {
			t.Fatal(err)
		}
		wire += n
		sent = append(sent, m)
	}
	if wire != buf.Len() {
		t.Fatalf("encode reported %d bytes, wrote %d", wire, buf.Len())
	}
	dec := &messageDecoder{r: &buf, limit: maxStreamMessage}
	// Decode everything before comparing: the decoder reuses its read
	// buffer, and nothing decoded may point into it.
	var got []*raftpb.Message
	for i := range sent {
		m, _, err := dec.decode()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		got = append(got, m)
	}
	for i, want := range sent {
		if !proto.Equal(got[i], want) {
			t.Fatalf("message %d: got %v, want %v", i, got[i], want)
		}
	}
	if _, _, err := dec.decode(); err != io.EOF {
		t.Fatalf("after the last message: %v, want io.EOF", err)
	}
}

// TestMsgAppV2RoundTrip sends raft's replication pattern (a full MsgApp,
// then continuations that only carry entries and the commit index, with
// heartbeats and term changes between) and checks both that every message
// comes back equal and that continuations used the short frame.
func TestMsgAppV2RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 2))
	const from, to = 7, 9
	var buf bytes.Buffer
	enc := &msgAppV2Encoder{w: &buf}
	var sent []*raftpb.Message
	var kinds []byte
	term, last := uint64(1), uint64(100)
	for range 3000 {
		var m *raftpb.Message
		switch r := rng.IntN(20); {
		case r == 0:
			m = linkHeartbeat
		case r == 1: // new term: the next MsgApp cannot continue the stream
			term++
			fallthrough
		default:
			prevTerm := term
			if rng.IntN(15) == 0 {
				prevTerm = term - 1 // probing back to an older entry
			}
			m = msg(raftpb.MsgApp, from, to, term, last)
			m.LogTerm = proto.Uint64(prevTerm)
			m.Commit = proto.Uint64(last - uint64(rng.IntN(5)))
			m.Entries = entries(last+1, rng.IntN(8), rng.IntN(2000), term)
			last += uint64(len(m.Entries))
		}
		start := buf.Len()
		if _, err := enc.encode(m); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, buf.Bytes()[start])
		sent = append(sent, m)
	}
	dec := &msgAppV2Decoder{r: &buf, local: to, remote: from, limit: maxStreamMessage}
	short := 0
	// Decode everything before comparing (the decoder reuses its buffer).
	var decoded []*raftpb.Message
	for i := range sent {
		m, _, err := dec.decode()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		decoded = append(decoded, m)
	}
	for i, want := range sent {
		got := decoded[i]
		if isLinkHeartbeat(want) {
			if !isLinkHeartbeat(got) {
				t.Fatalf("message %d: got %v, want a link heartbeat", i, got)
			}
			continue
		}
		if kinds[i] == msgAppV2Entries {
			short++
		}
		if !proto.Equal(got, want) {
			t.Fatalf("message %d (frame type %d): got %v, want %v", i, kinds[i], got, want)
		}
	}
	if short < len(sent)/2 {
		t.Fatalf("only %d of %d MsgApps used the continuation frame", short, len(sent))
	}
}

// TestDecodeRefusesBadInput: lengths beyond the limit are errors before
// any allocation, truncation is io.ErrUnexpectedEOF, an unknown frame type
// is an error, and garbage is an error, never a panic.
func TestDecodeRefusesBadInput(t *testing.T) {
	huge := binary.BigEndian.AppendUint64(nil, 1<<62)
	if _, _, err := (&messageDecoder{r: bytes.NewReader(huge), limit: maxStreamMessage}).decode(); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("huge length: %v", err)
	}
	for name, in := range map[string][]byte{
		"huge message":       append([]byte{msgAppV2Message}, huge...),
		"huge entry count":   append([]byte{msgAppV2Entries}, huge...),
		"huge entry":         append(append([]byte{msgAppV2Entries}, binary.BigEndian.AppendUint64(nil, 1)...), huge...),
		"unknown frame type": {9},
	} {
		_, _, err := (&msgAppV2Decoder{r: bytes.NewReader(in), limit: maxStreamMessage}).decode()
		if err == nil || (name != "unknown frame type" && !errors.Is(err, ErrMessageTooLarge)) {
			t.Fatalf("%s: %v", name, err)
		}
	}

	var buf bytes.Buffer
	if _, err := (&messageEncoder{w: &buf}).encode(msg(raftpb.MsgApp, 1, 2, 3, 4)); err != nil {
		t.Fatal(err)
	}
	whole := buf.Bytes()
	for cut := 1; cut < len(whole); cut++ {
		_, _, err := (&messageDecoder{r: bytes.NewReader(whole[:cut]), limit: maxStreamMessage}).decode()
		if cut < 8 && err != io.ErrUnexpectedEOF || cut >= 8 && err != io.ErrUnexpectedEOF {
			t.Fatalf("cut at %d of %d: %v, want io.ErrUnexpectedEOF", cut, len(whole), err)
		}
	}
	garbage := append(binary.BigEndian.AppendUint64(nil, 4), 0xff, 0xff, 0xff, 0xff)
	if _, _, err := (&messageDecoder{r: bytes.NewReader(garbage), limit: maxStreamMessage}).decode(); err == nil {
		t.Fatal("garbage decoded without error")
	}
}

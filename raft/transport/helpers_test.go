package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/poll"
)

// recorder is a Raft that records what the transport gives it. hook, if
// set, runs before a message is recorded (to block or refuse it).
type recorder struct {
	mu          sync.Mutex
	msgs        []*raftpb.Message
	byType      map[raftpb.MessageType]int
	unreachable map[uint64]int
	snaps       []snapReport
	removed     map[uint64]bool
	hook        func(ctx context.Context, m *raftpb.Message) error
}

type snapReport struct {
	id     uint64
	status etcdraft.SnapshotStatus
}

func newRecorder() *recorder {
	return &recorder{byType: map[raftpb.MessageType]int{}, unreachable: map[uint64]int{}, removed: map[uint64]bool{}}
}

func (r *recorder) Process(ctx context.Context, m *raftpb.Message) error {
	r.mu.Lock()
	hook := r.hook
	r.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, m); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
	r.byType[m.GetType()]++
	return nil
}

func (r *recorder) IsIDRemoved(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.removed[id]
}

func (r *recorder) ReportUnreachable(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unreachable[id]++
}

func (r *recorder) ReportSnapshot(id uint64, st etcdraft.SnapshotStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snaps = append(r.snaps, snapReport{id, st})
}

func (r *recorder) setHook(h func(context.Context, *raftpb.Message) error) {
	r.mu.Lock()
	r.hook = h
	r.mu.Unlock()
}

func (r *recorder) count(typ raftpb.MessageType) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byType[typ]
}

func (r *recorder) unreachableCount(id uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unreachable[id]
}

func (r *recorder) snapReports() []snapReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]snapReport(nil), r.snaps...)
}

func (r *recorder) messages() []*raftpb.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*raftpb.Message(nil), r.msgs...)
}

// member is a transport served on a real loopback listener.
type member struct {
	t    testing.TB
	id   uint64
	cid  uint64
	tr   *Transport
	raft *recorder
	addr string // host:port, kept across restarts
	url  string
	srv  *http.Server
	ln   net.Listener

	mod       func(*Config)
	serverTLS *tls.Config
}

// testLogger writes the transport's warnings to the test log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newMember listens on 127.0.0.1:0 (https when serverTLS is set); mod
// adjusts the config before the transport starts.
func newMember(t testing.TB, id, cid uint64, serverTLS *tls.Config, mod func(*Config)) *member {
	t.Helper()
	m := &member{t: t, id: id, cid: cid, raft: newRecorder(), addr: "127.0.0.1:0", mod: mod, serverTLS: serverTLS}
	m.start()
	t.Cleanup(m.stop)
	return m
}

func (m *member) start() {
	m.t.Helper()
	ln, err := net.Listen("tcp", m.addr)
	if err != nil {
		m.t.Fatalf("listen %s: %v", m.addr, err)
	}
	m.addr = ln.Addr().String()
	scheme := "http"
	if m.serverTLS != nil {
		scheme = "https"
		ln = tls.NewListener(ln, m.serverTLS)
	}
	m.url = scheme + "://" + m.addr
	cfg := Config{
		ID: m.id, ClusterID: m.cid, URLs: []string{m.url}, Raft: m.raft,
		Logger: testLogger(m.t), ProbeInterval: -1,
	}
	if m.mod != nil {
		m.mod(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		m.t.Fatal(err)
	}
	m.tr, m.ln = tr, ln
	m.srv = &http.Server{Handler: tr.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	go m.srv.Serve(ln)
}

// stop closes the listener and every connection, then the transport.
func (m *member) stop() {
	if m.srv == nil {
		return
	}
	m.srv.Close()
	m.tr.Stop()
	m.srv = nil
}

// restart stops the member and starts a new transport (with a fresh
// recorder) on the same address.
func (m *member) restart() {
	m.t.Helper()
	m.stop()
	m.raft = newRecorder()
	m.start()
}

// connect makes every member a peer of every other.
func connect(t testing.TB, ms ...*member) {
	t.Helper()
	for _, a := range ms {
		for _, b := range ms {
			if a != b {
				if err := a.tr.AddPeer(b.id, []string{b.url}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// waitStreams waits until a writes to and reads from b on both streams.
func waitStreams(t testing.TB, a, b *member) {
	t.Helper()
	poll.Until(t, "streams between "+FormatID(a.id)+" and "+FormatID(b.id), func() bool {
		st, ok := a.tr.PeerStatus(b.id)
		return ok && st.WritingMsgApp && st.WritingMessage && st.ReadingMsgApp && st.ReadingMessage
	})
}

func msg(typ raftpb.MessageType, from, to, term, index uint64) *raftpb.Message {
	return &raftpb.Message{Type: typ.Enum(), From: proto.Uint64(from), To: proto.Uint64(to), Term: proto.Uint64(term), Index: proto.Uint64(index)}
}

func entries(first uint64, n, size int, term uint64) []*raftpb.Entry {
	out := make([]*raftpb.Entry, n)
	for i := range out {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(int(first) + i + j)
		}
		out[i] = &raftpb.Entry{Term: proto.Uint64(term), Index: proto.Uint64(first + uint64(i)), Type: raftpb.EntryNormal.Enum(), Data: data}
	}
	return out
}

// fileSnapshots serves images from memory and stores received ones in
// dir/<index>.snap.db.
type fileSnapshots struct {
	dir   string
	image func(m *raftpb.Message) ([]byte, int64) // bytes to send, size to announce
	mu    sync.Mutex
	opens []PeerInfo
}

func (s *fileSnapshots) Open(m *raftpb.Message, peer PeerInfo) (io.ReadCloser, int64, error) {
	s.mu.Lock()
	s.opens = append(s.opens, peer)
	s.mu.Unlock()
	if s.image == nil {
		return nil, 0, errors.New("no image")
	}
	b, size := s.image(m)
	return io.NopCloser(bytes.NewReader(b)), size, nil
}

func (s *fileSnapshots) ReceivePath(m *raftpb.Message) (string, error) {
	return s.dir + "/" + FormatID(m.GetSnapshot().GetMetadata().GetIndex()) + ".snap.db", nil
}

func (s *fileSnapshots) openedFor() []PeerInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]PeerInfo(nil), s.opens...)
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// metric reads one series of the transport's metrics: a counter's or
// gauge's value, or a histogram's sample count; labels are name, value
// pairs. A series that does not exist reads 0.
func metric(t testing.TB, tr *Transport, name string, labels ...string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(tr.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

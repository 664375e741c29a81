package raft

import (
	"io"
	"log/slog"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestLateHeartbeats: a heartbeat to a peer more than twice the heartbeat
// interval after the one before it is counted in
// etcd_server_heartbeat_send_failures_total, as etcd counts it; heartbeats
// on time, the first one to each peer, the first after a reset (a change
// of leader or role) and other messages are not.
func TestLateHeartbeats(t *testing.T) {
	now := time.Unix(1000, 0)
	m := NewMetrics()
	n := &Node{cfg: Config{TickInterval: 100 * time.Millisecond, Metrics: m},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), heartbeats: newHeartbeatDetector(100 * time.Millisecond)}
	n.heartbeats.now = func() time.Time { return now }
	hb := func(to uint64) *raftpb.Message {
		return &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), To: proto.Uint64(to)}
	}
	app := func(to uint64) *raftpb.Message {
		return &raftpb.Message{Type: raftpb.MsgApp.Enum(), To: proto.Uint64(to)}
	}
	step := func(d time.Duration, want float64, msgs ...*raftpb.Message) {
		t.Helper()
		now = now.Add(d)
		n.checkHeartbeats(msgs)
		var late dto.Metric
		if err := m.HeartbeatSendFailures.Write(&late); err != nil {
			t.Fatal(err)
		}
		if got := late.GetCounter().GetValue(); got != want {
			t.Fatalf("after %v: %v late heartbeats, want %v", d, got, want)
		}
	}
	step(0, 0, hb(2), hb(3))                    // the first to each peer
	step(200*time.Millisecond, 0, hb(2), hb(3)) // exactly the bound
	step(201*time.Millisecond, 2, hb(2), hb(3)) // both late
	step(time.Second, 2, app(2), app(3))        // not heartbeats
	step(50*time.Millisecond, 3, hb(2))         // 1.05 s after the last to 2
	n.heartbeats.reset()
	step(time.Second, 3, hb(2), hb(3)) // the first after a reset

	off := newHeartbeatDetector(0)
	off.now = func() time.Time { return now }
	off.observe(2)
	now = now.Add(time.Hour)
	if late := off.observe(2); late > 0 {
		t.Fatalf("a detector without a heartbeat interval found a heartbeat %v late", late)
	}
}

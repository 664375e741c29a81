package raft

import (
	"fmt"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// heartbeatDetector is etcd's timeout detector for a leader's heartbeats:
// a heartbeat sent to a peer more than twice the heartbeat interval after
// the one before it means the raft goroutine fell behind (in etcd's
// words, the leader is overloaded, likely by a slow disk), and followers
// that wait for it may start an election. etcd logs each such heartbeat
// and counts it in etcd_server_heartbeat_send_failures_total; so does
// this. It is reset whenever raft's soft state changes (a new leader or
// role), as etcd resets its detector, so the first heartbeat of a term is
// never late. Used by the raft goroutine only.
type heartbeatDetector struct {
	max  time.Duration
	last map[uint64]time.Time // peer id -> when the last heartbeat to it was sent
	now  func() time.Time
}

func newHeartbeatDetector(interval time.Duration) heartbeatDetector {
	return heartbeatDetector{max: 2 * interval, last: make(map[uint64]time.Time), now: time.Now}
}

// observe records a heartbeat to peer to sent now and returns by how much
// it exceeded the bound since the previous one (positive: late).
func (d *heartbeatDetector) observe(to uint64) time.Duration {
	if d.max <= 0 {
		return 0 // no heartbeat interval: ticks are driven by hand (tests)
	}
	now := d.now()
	prev, ok := d.last[to]
	d.last[to] = now
	if !ok {
		return 0
	}
	return now.Sub(prev) - d.max
}

func (d *heartbeatDetector) reset() { clear(d.last) }

// checkHeartbeats observes the heartbeats among msgs, which are about to
// be sent, and reports the late ones.
func (n *Node) checkHeartbeats(msgs []*raftpb.Message) {
	for _, m := range msgs {
		if m.GetType() != raftpb.MsgHeartbeat {
			continue
		}
		if exceeded := n.heartbeats.observe(m.GetTo()); exceeded > 0 {
			n.log.Warn("leader failed to send out heartbeat on time; took too long, leader is overloaded likely from slow disk",
				"to", fmt.Sprintf("%x", m.GetTo()), "heartbeat-interval", n.cfg.TickInterval,
				"expected-duration", n.heartbeats.max, "exceeded-duration", exceeded)
			n.cfg.Metrics.heartbeatLate()
		}
	}
}

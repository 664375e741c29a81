package transport

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/poll"
)

// offeringRaft is a recorder that also takes messages straight from the
// stream readers (Offerer), refusing a third of them as a full receive
// queue would, while Process runs slowly for a tenth, so both paths and
// the switch between them are exercised. Which messages are refused or
// slow is a function of the seed and the message, so a seed replays the
// same choices whatever the goroutines' timing.
type offeringRaft struct {
	*recorder
	seed            uint64
	offered, queued atomic.Int64
}

// draw is a number in [0, n) fixed by the seed, the purpose and m.
func (o *offeringRaft) draw(m *raftpb.Message, purpose uint64, n uint64) uint64 {
	r := rand.New(rand.NewPCG(o.seed^purpose, uint64(m.GetType())<<56^m.GetIndex()<<20^m.GetCommit()))
	return r.Uint64N(n)
}

func (o *offeringRaft) Offer(m *raftpb.Message) (bool, error) {
	if o.draw(m, 1, 3) == 0 {
		return false, nil
	}
	o.offered.Add(1)
	return true, o.recorder.Process(context.Background(), m)
}

func (o *offeringRaft) Process(ctx context.Context, m *raftpb.Message) error {
	o.queued.Add(1)
	if o.draw(m, 2, 10) == 0 {
		// A raft goroutine busy elsewhere: messages pile up behind this
		// one, and the reader must queue them rather than offer them.
		time.Sleep(200 * time.Microsecond)
	}
	return o.recorder.Process(ctx, m)
}

// TestOfferKeepsStreamOrder: messages a stream reader hands to raft
// directly never overtake ones it queued before, on either stream. The
// messages go in batches, each sent once the last is delivered: a batch
// starts with both queues empty, so its first messages are offered, and
// the refused and slow ones then push the rest through the queue.
func TestOfferKeepsStreamOrder(t *testing.T) {
	s := seed(t)
	var or *offeringRaft
	a := newMember(t, 1, 100, nil, nil)
	b := newMember(t, 2, 100, nil, func(c *Config) {
		or = &offeringRaft{recorder: newRecorder(), seed: s}
		c.Raft = or
	})
	connect(t, a, b)
	waitStreams(t, a, b)
	const n = 3000
	var sent []*raftpb.Message
	last := uint64(10)
	for i := 0; i < n; i++ {
		var m *raftpb.Message
		if i%3 == 0 {
			// The message stream: heartbeats numbered by Commit.
			m = msg(raftpb.MsgHeartbeat, 1, 2, 3, 0)
			m.Commit = proto.Uint64(uint64(i))
		} else {
			m = msg(raftpb.MsgApp, 1, 2, 3, last)
			m.LogTerm, m.Commit = proto.Uint64(3), proto.Uint64(last)
			m.Entries = entries(last+1, 1, 64, 3)
			last++
		}
		sent = append(sent, m)
	}
	for i := 0; i < n; i += 50 {
		a.tr.Send(sent[i : i+50])
		poll.Until(t, fmt.Sprintf("the first %d messages delivered", i+50), func() bool {
			return or.count(raftpb.MsgApp)+or.count(raftpb.MsgHeartbeat) == i+50
		})
	}
	var lastApp, lastBeat int64 = -1, -1
	for _, m := range or.messages() {
		switch m.GetType() {
		case raftpb.MsgApp:
			if int64(m.GetIndex()) <= lastApp {
				t.Fatalf("MsgApp at index %d after %d: the stream's order was lost", m.GetIndex(), lastApp)
			}
			lastApp = int64(m.GetIndex())
		case raftpb.MsgHeartbeat:
			if int64(m.GetCommit()) <= lastBeat {
				t.Fatalf("heartbeat %d after %d: the stream's order was lost", m.GetCommit(), lastBeat)
			}
			lastBeat = int64(m.GetCommit())
		}
	}
	t.Logf("%d messages: %d offered straight to raft, %d through the queue", n, or.offered.Load(), or.queued.Load())
	if or.offered.Load() == 0 || or.queued.Load() == 0 {
		t.Fatalf("offered %d, queued %d: both paths must be used", or.offered.Load(), or.queued.Load())
	}
}

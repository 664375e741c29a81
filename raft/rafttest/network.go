package rafttest

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/raft"
)

// Faults is what the network does to messages, per directed link. The
// zero value delivers everything at once, in order of sending.
type Faults struct {
	// Drop, Dup are probabilities (0..1) that a message is lost, or
	// delivered twice.
	Drop, Dup float64
	// MaxDelay delays each message by a random duration in [0, MaxDelay),
	// which also reorders messages on a link.
	MaxDelay time.Duration
}

// Network is an in-memory transport between the members of one process:
// each member's raft.Transport is Network.Transport(id). Messages are
// cloned, delivered with Node.Step from their own goroutines (so a send
// never blocks the sender's raft goroutine), and snapshots are streamed
// into a file the receiving node creates and handed over with
// StepSnapshot, as a peer transport does.
//
// Every fault decision is drawn from a per-link generator seeded from the
// network's seed and the link, so one seed gives each link the same
// sequence of fates whatever the goroutine schedule.
type Network struct {
	seed uint64

	mu     sync.Mutex
	nodes  map[uint64]*raft.Node // attached members; guarded by mu
	links  map[[2]uint64]*link   // guarded by mu
	faults Faults                // default for links; guarded by mu
	cut    map[[2]uint64]bool    // directed partitions; guarded by mu

	wg     sync.WaitGroup // deliveries in flight
	closed atomic.Bool

	tickMu sync.Mutex
	tickC  chan struct{} // closed and replaced at each delivery

	// observe, if set, sees every message sent, before its fate is
	// decided (SetObserver).
	observe atomic.Pointer[func(from uint64, m *raftpb.Message)]

	// Counters, for the tests' summaries.
	Sent, Dropped, Duplicated, Delivered atomic.Int64
	SnapsSent, SnapsDone, SnapsFailed    atomic.Int64
}

type link struct {
	mu  sync.Mutex
	rng *rand.Rand
}

// NewNetwork returns a network with no members.
func NewNetwork(seed uint64) *Network {
	return &Network{seed: seed, nodes: map[uint64]*raft.Node{}, links: map[[2]uint64]*link{}, cut: map[[2]uint64]bool{}}
}

// SetFaults sets the faults of every link.
func (nw *Network) SetFaults(f Faults) {
	nw.mu.Lock()
	nw.faults = f
	nw.mu.Unlock()
}

// SetObserver calls fn with every message a member sends from now on (nil:
// none), from the sender's raft goroutine: fn must not block or keep m.
func (nw *Network) SetObserver(fn func(from uint64, m *raftpb.Message)) {
	if fn == nil {
		nw.observe.Store(nil)
		return
	}
	nw.observe.Store(&fn)
}

// Attach makes node reachable as member id (again, after a restart).
func (nw *Network) Attach(id uint64, node *raft.Node) {
	nw.mu.Lock()
	nw.nodes[id] = node
	nw.mu.Unlock()
}

// Detach makes member id unreachable (it crashed or stopped): messages to
// it are lost.
func (nw *Network) Detach(id uint64) {
	nw.mu.Lock()
	delete(nw.nodes, id)
	nw.mu.Unlock()
}

// Cut drops every message from -> to (one way) until Heal.
func (nw *Network) Cut(from, to uint64) {
	nw.mu.Lock()
	nw.cut[[2]uint64{from, to}] = true
	nw.mu.Unlock()
}

// Isolate cuts id off from every other id in ids, both ways.
func (nw *Network) Isolate(id uint64, ids []uint64) {
	for _, o := range ids {
		if o != id {
			nw.Cut(id, o)
			nw.Cut(o, id)
		}
	}
}

// Heal removes every partition.
func (nw *Network) Heal() {
	nw.mu.Lock()
	clear(nw.cut)
	nw.mu.Unlock()
}

// Close waits for deliveries in flight; later sends are dropped.
func (nw *Network) Close() {
	nw.closed.Store(true)
	nw.wg.Wait()
}

// fate decides what happens to one message on from -> to.
type fate struct {
	drop  bool
	dup   bool
	delay time.Duration
	node  *raft.Node
}

func (nw *Network) decide(from, to uint64) fate {
	nw.mu.Lock()
	key := [2]uint64{from, to}
	l := nw.links[key]
	if l == nil {
		l = &link{rng: rand.New(rand.NewPCG(nw.seed, from<<32^to))}
		nw.links[key] = l
	}
	f, cut, node := nw.faults, nw.cut[key], nw.nodes[to]
	nw.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	// Draw every number every time, so a link's sequence of fates does
	// not depend on the faults in force when it was drawn.
	d, u, r := l.rng.Float64(), l.rng.Float64(), l.rng.Float64()
	var ft fate
	ft.node = node
	ft.drop = cut || node == nil || d < f.Drop || nw.closed.Load()
	ft.dup = u < f.Dup
	if f.MaxDelay > 0 {
		ft.delay = time.Duration(r * float64(f.MaxDelay))
	}
	return ft
}

// after runs fn after d in a goroutine the network waits for on Close.
func (nw *Network) after(d time.Duration, fn func()) {
	nw.wg.Add(1)
	go func() {
		defer nw.wg.Done()
		if d > 0 {
			t := time.NewTimer(d)
			<-t.C
		}
		fn()
	}()
}

func (nw *Network) tick() {
	nw.tickMu.Lock()
	if nw.tickC != nil {
		close(nw.tickC)
		nw.tickC = nil
	}
	nw.tickMu.Unlock()
}

// Delivery returns a channel closed at the next delivered message.
func (nw *Network) Delivery() <-chan struct{} {
	nw.tickMu.Lock()
	defer nw.tickMu.Unlock()
	if nw.tickC == nil {
		nw.tickC = make(chan struct{})
	}
	return nw.tickC
}

// Transport returns member id's transport.
func (nw *Network) Transport(id uint64) raft.Transport { return endpoint{nw: nw, id: id} }

// Node returns the node attached as id, if any.
func (nw *Network) Node(id uint64) *raft.Node {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.nodes[id]
}

type endpoint struct {
	nw *Network
	id uint64
}

// Send queues each message; a lost one is reported unreachable to the
// sender, as a peer transport does when its queue is full or the stream
// broke.
func (e endpoint) Send(msgs []*raftpb.Message) {
	nw := e.nw
	obs := nw.observe.Load()
	for _, m := range msgs {
		nw.Sent.Add(1)
		if obs != nil {
			(*obs)(e.id, m)
		}
		to := m.GetTo()
		ft := nw.decide(e.id, to)
		if ft.drop {
			nw.Dropped.Add(1)
			if s := nw.Node(e.id); s != nil {
				s.ReportUnreachable(to)
			}
			continue
		}
		c := proto.Clone(m).(*raftpb.Message)
		n := 1
		if ft.dup {
			n = 2
			nw.Duplicated.Add(1)
		}
		for i := 0; i < n; i++ {
			nw.after(ft.delay, func() {
				// Deliver to whatever is attached now: a member that
				// restarted meanwhile gets it, as over a real network.
				if dst := nw.Node(to); dst != nil {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					if dst.Step(ctx, c) == nil {
						nw.Delivered.Add(1)
						nw.tick()
					}
					cancel()
				}
			})
		}
	}
}

// SendSnapshot streams the image into a file the receiver creates, then
// delivers the message with it, and reports the outcome to the sender.
func (e endpoint) SendSnapshot(s raft.OutgoingSnapshot) {
	nw := e.nw
	nw.SnapsSent.Add(1)
	to := s.Message.GetTo()
	ft := nw.decide(e.id, to)
	nw.after(ft.delay, func() {
		err := nw.transfer(s, ft)
		status := etcdraft.SnapshotFinish
		if err != nil {
			status = etcdraft.SnapshotFailure
			nw.SnapsFailed.Add(1)
		} else {
			nw.SnapsDone.Add(1)
		}
		if src := nw.Node(e.id); src != nil {
			src.ReportSnapshot(to, status)
		}
	})
}

func (nw *Network) transfer(s raft.OutgoingSnapshot, ft fate) (err error) {
	defer s.Payload.Close()
	if ft.drop {
		return fmt.Errorf("rafttest: snapshot to %x lost", s.Message.GetTo())
	}
	f, err := ft.node.CreateImageFile()
	if err != nil {
		return err
	}
	path := f.Name()
	n, err := io.Copy(f, s.Payload)
	if err == nil && n != s.Size {
		err = fmt.Errorf("rafttest: snapshot payload is %d bytes, announced %d", n, s.Size)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return ft.node.StepSnapshot(ctx, proto.Clone(s.Message).(*raftpb.Message), path)
}

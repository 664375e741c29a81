package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/vfs"
)

// testImage is size bytes, half random and half a repeating pattern, so
// compression has something to do but cannot make it vanish.
func testImage(rng *rand.Rand, size int) []byte {
	b := make([]byte, size)
	for i := 0; i < size; i += 4096 {
		end := min(i+4096, size)
		if (i/4096)%2 == 0 {
			for j := i; j < end; j++ {
				b[j] = byte(rng.Uint32())
			}
		} else {
			for j := i; j < end; j++ {
				b[j] = byte(j % 251)
			}
		}
	}
	return b
}

func snapMsg(from, to, index uint64) *raftpb.Message {
	m := msg(raftpb.MsgSnap, from, to, 5, 0)
	m.Snapshot = &raftpb.Snapshot{Data: []byte("meta"), Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(index), Term: proto.Uint64(5), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2}},
	}}
	return m
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestSnapshotTransfer sends a 48 MiB image with a MsgSnap. The receiver's
// raft sees the MsgSnap only once the image is complete at its final path
// (checked from inside Process), no temporary file is left, the sender's
// raft hears SnapshotFinish, and the metrics count it. Between Strata
// members the image travels compressed; raw is what an etcd peer gets.
func TestSnapshotTransfer(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 4))
	image := testImage(rng, 48<<20)
	sum := xxhash.Sum64(image)
	for _, compress := range []bool{true, false} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			dir := t.TempDir()
			src := &fileSnapshots{image: func(*raftpb.Message) ([]byte, int64) { return image, int64(len(image)) }}
			dst := &fileSnapshots{dir: dir}
			a := newMember(t, 1, 100, nil, func(c *Config) { c.Snapshots, c.DisableSnapshotCompression = src, !compress })
			b := newMember(t, 2, 100, nil, func(c *Config) { c.Snapshots = dst })
			var checked error = errors.New("Process never saw the MsgSnap")
			b.raft.setHook(func(_ context.Context, m *raftpb.Message) error {
				if m.GetType() == raftpb.MsgSnap {
					path, _ := dst.ReceivePath(m)
					got, err := os.ReadFile(path)
					switch {
					case err != nil:
						checked = err
					case len(got) != len(image) || xxhash.Sum64(got) != sum:
						checked = fmt.Errorf("image at %s has %d bytes, hash %x; want %d, %x", path, len(got), xxhash.Sum64(got), len(image), sum)
					default:
						checked = nil
					}
				}
				return nil
			})
			connect(t, a, b)
			waitStreams(t, a, b) // so a knows b is Strata
			a.tr.Send([]*raftpb.Message{snapMsg(1, 2, 4242)})
			poll.Until(t, "SnapshotFinish", func() bool {
				r := a.raft.snapReports()
				return len(r) > 0 && r[len(r)-1] == snapReport{2, etcdraft.SnapshotFinish}
			})
			if b.raft.count(raftpb.MsgSnap) != 1 || checked != nil {
				t.Fatalf("receiver's raft got %d MsgSnap; image check: %v", b.raft.count(raftpb.MsgSnap), checked)
			}
			if names := dirNames(t, dir); len(names) != 1 || names[0] != "1092.snap.db" {
				t.Fatalf("snapshot dir holds %v, want only 1092.snap.db", names)
			}
			opened := src.openedFor()
			if len(opened) != 1 || !opened[0].Strata {
				t.Fatalf("image opened for %+v, want once, for a Strata peer", opened)
			}
			wire := metric(t, b.tr, "etcd_network_peer_received_bytes_total", "From", "1")
			t.Logf("image %d bytes, %.0f bytes received from the sender", len(image), wire)
			if compress && wire > float64(len(image))*3/4 || !compress && wire < float64(len(image)) {
				t.Fatalf("%.0f bytes on the wire for a %d byte image (compress=%v)", wire, len(image), compress)
			}
			if n := metric(t, a.tr, "etcd_network_snapshot_send_success", "To", "2"); n != 1 {
				t.Fatalf("etcd_network_snapshot_send_success = %v", n)
			}
			if n := metric(t, b.tr, "etcd_network_snapshot_receive_success", "From", "1"); n != 1 {
				t.Fatalf("etcd_network_snapshot_receive_success = %v", n)
			}
			for _, name := range []string{"etcd_snap_db_save_total_duration_seconds", "etcd_snap_db_fsync_duration_seconds"} {
				if n := metric(t, b.tr, name); n != 1 {
					t.Fatalf("%s counts %v saves, want 1", name, n)
				}
			}
			if st, _ := a.tr.PeerStatus(2); st.SentSnapshot != 1 {
				t.Fatalf("status counts %d snapshots sent", st.SentSnapshot)
			}
		})
	}
}

// TestSnapshotFailures: whatever breaks the transfer, the receiver's raft
// never sees the MsgSnap, no file is left (neither temporary nor final),
// and the sender's raft hears SnapshotFailure and that the peer was
// unreachable.
func TestSnapshotFailures(t *testing.T) {
	image := testImage(rand.New(rand.NewPCG(1, 1)), 3<<20)
	for _, c := range []struct {
		name     string
		announce int64                // the size Open reports
		fault    func(vfs.Event) bool // the receiver's disk fails this
		noStore  bool
	}{
		{name: "fsync fails", announce: int64(len(image)), fault: func(e vfs.Event) bool { return e.Op == vfs.OpSync }},
		{name: "write fails", announce: int64(len(image)), fault: func(e vfs.Event) bool { return e.Op == vfs.OpWrite }},
		{name: "directory fsync fails", announce: int64(len(image)), fault: func(e vfs.Event) bool { return e.Op == vfs.OpSyncDir }},
		{name: "image shorter than announced", announce: int64(len(image)) + 100},
		{name: "image longer than announced", announce: int64(len(image)) - 100},
		{name: "receiver has no store", announce: int64(len(image)), noStore: true},
	} {
		for _, compress := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/compress=%v", c.name, compress), func(t *testing.T) {
				dir := t.TempDir()
				src := &fileSnapshots{image: func(*raftpb.Message) ([]byte, int64) { return image, c.announce }}
				dst := &fileSnapshots{dir: dir}
				a := newMember(t, 1, 100, nil, func(cfg *Config) { cfg.Snapshots, cfg.DisableSnapshotCompression = src, !compress })
				b := newMember(t, 2, 100, nil, func(cfg *Config) {
					if !c.noStore {
						cfg.Snapshots = dst
					}
					if c.fault != nil {
						cfg.FS = vfs.NewFaultFS(vfs.Default, func(e vfs.Event) *vfs.Fault {
							if c.fault(e) {
								return &vfs.Fault{Err: vfs.EIO}
							}
							return nil
						})
					}
				})
				connect(t, a, b)
				waitStreams(t, a, b)
				a.tr.Send([]*raftpb.Message{snapMsg(1, 2, 7)})
				poll.Until(t, "SnapshotFailure", func() bool {
					r := a.raft.snapReports()
					return len(r) > 0 && r[len(r)-1] == snapReport{2, etcdraft.SnapshotFailure}
				})
				poll.Until(t, "unreachable", func() bool { return a.raft.unreachableCount(2) > 0 })
				// The receiver is done with the request once it counted the
				// failure; only then is its directory final.
				poll.Until(t, "the receiver's failure count", func() bool {
					return metric(t, b.tr, "etcd_network_snapshot_receive_failures", "From", "1") == 1
				})
				if n := b.raft.count(raftpb.MsgSnap); n != 0 {
					t.Fatalf("receiver's raft got %d MsgSnap", n)
				}
				names := dirNames(t, dir)
				if c.name == "directory fsync fails" {
					// Renamed but not known durable: the file may stay, raft
					// was not told, and the next snapshot replaces it.
					if len(names) > 1 || len(names) == 1 && strings.Contains(names[0], ".tmp-") {
						t.Fatalf("snapshot dir holds %v", names)
					}
				} else if len(names) != 0 {
					t.Fatalf("snapshot dir holds %v after a failed transfer", names)
				}
				if n := metric(t, a.tr, "etcd_network_snapshot_send_failures", "To", "2"); n != 1 {
					t.Fatalf("etcd_network_snapshot_send_failures = %v", n)
				}
			})
		}
	}
}

// TestOneSnapshotInFlight: while a snapshot to a peer is being sent (its
// image source blocked here), another MsgSnap to it is dropped and
// reported failed at once, without blocking Send; the first then finishes.
func TestOneSnapshotInFlight(t *testing.T) {
	gate := make(chan struct{})
	opened := make(chan struct{}, 2)
	src := &fileSnapshots{image: func(*raftpb.Message) ([]byte, int64) {
		opened <- struct{}{}
		<-gate
		return []byte("image"), 5
	}}
	a := newMember(t, 1, 100, nil, func(c *Config) { c.Snapshots = src })
	b := newMember(t, 2, 100, nil, func(c *Config) { c.Snapshots = &fileSnapshots{dir: t.TempDir()} })
	connect(t, a, b)
	a.tr.Send([]*raftpb.Message{snapMsg(1, 2, 10)})
	<-opened
	a.tr.Send([]*raftpb.Message{snapMsg(1, 2, 11)})
	poll.Until(t, "the second MsgSnap reported failed", func() bool {
		r := a.raft.snapReports()
		return len(r) == 1 && r[0] == snapReport{2, etcdraft.SnapshotFailure}
	})
	close(gate)
	poll.Until(t, "the first MsgSnap finished", func() bool {
		r := a.raft.snapReports()
		return len(r) == 2 && r[1] == snapReport{2, etcdraft.SnapshotFinish}
	})
	if n := b.raft.count(raftpb.MsgSnap); n != 1 {
		t.Fatalf("receiver got %d MsgSnap, want 1", n)
	}
}

// TestImageEncodingRefusesDamage: the compressed encoding's checks catch a
// flipped byte, truncation, extra data and a wrong announced size.
func TestImageEncodingRefusesDamage(t *testing.T) {
	image := testImage(rand.New(rand.NewPCG(2, 2)), 1<<20)
	var enc bytes.Buffer
	if err := encodeImage(&enc, bytes.NewReader(image), int64(len(image))); err != nil {
		t.Fatal(err)
	}
	good := enc.Bytes()
	var out bytes.Buffer
	if n, err := decodeImage(&out, bytes.NewReader(good), int64(len(image))); err != nil || n != int64(len(image)) || !bytes.Equal(out.Bytes(), image) {
		t.Fatalf("round trip: %d bytes, %v", n, err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x40
	for name, c := range map[string]struct {
		in   []byte
		size int64
	}{
		"flipped byte":    {flipped, int64(len(image))},
		"truncated":       {good[:len(good)-20], int64(len(image))},
		"extra data":      {append(bytes.Clone(good), good...), int64(len(image))},
		"size too small":  {good, int64(len(image)) - 1},
		"size too large":  {good, int64(len(image)) + 1},
		"not zstd at all": {image[:4096], 100},
	} {
		if _, err := decodeImage(io.Discard, bytes.NewReader(c.in), c.size); err == nil {
			t.Fatalf("%s: decoded without error", name)
		}
	}
	// An image followed by a checksum that is not its own: encodeImage of
	// image+wrong8 puts the wrong 8 bytes where the checksum of a
	// 1000-byte image belongs.
	var wrong bytes.Buffer
	if err := encodeImage(&wrong, bytes.NewReader(append(bytes.Clone(image[:1000]), 1, 2, 3, 4, 5, 6, 7, 8)), 1008); err != nil {
		t.Fatal(err)
	}
	if _, err := decodeImage(io.Discard, &wrong, 1000); !errors.Is(err, ErrSnapshotChecksum) {
		t.Fatalf("wrong checksum: %v", err)
	}
}

// TestSaveImageLeavesNothingOnFailure: a fill that fails mid-way leaves
// neither the temporary file nor the final one.
func TestSaveImageLeavesNothingOnFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.snap.db")
	_, err := saveImage(vfs.Default, path, func(w io.Writer) (int64, error) {
		n, _ := w.Write(make([]byte, 3<<20))
		return int64(n), errors.New("connection reset")
	}, nil)
	if err == nil || !strings.Contains(err.Error(), ".tmp-") {
		t.Fatalf("error %v does not name the temporary file", err)
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("left %v", names)
	}
}

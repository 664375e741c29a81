// Package transport carries raft messages between the members of a
// cluster over etcd 3.7's peer protocol (etcd's rafthttp), on the peer
// port (--listen-peer-urls). Nothing here assumes that the peer is Strata:
// an etcd 3.7 member can talk to it, and e2e/peerwire_test.go proves that
// against etcd's own rafthttp.
//
// # Protocol
//
// The paths and headers are etcd's wire format (wire.go) and never change.
//
//   - /raft/stream/msgapp/<id> and /raft/stream/message/<id> are the two
//     long-lived streams. Each member opens a GET to each of the others'
//     streams and reads what they write into the response.
//     MsgApp travels on the MsgApp v2 stream, in etcd's codec (codec.go),
//     which sends consecutive appends of one term without repeating the
//     term and index. Everything else travels on the message stream, as
//     length-prefixed raftpb.Message frames. An idle stream gets a link
//     heartbeat every ConnReadTimeout/3, so a dead connection is found
//     within ConnReadTimeout.
//   - POST /raft is the pipeline: one message per request. It is used
//     while no stream to the peer is up.
//   - POST /raft/snapshot is a MsgSnap followed by its image (below).
//   - GET /raft/probing measures the round trip every ProbeInterval
//     (etcd_network_peer_round_trip_time_seconds).
//   - /members, /members/promote/<id> and /version answer as etcd's peer
//     handler does (peerhttp.go).
//
// Every request and answer carries X-Etcd-Cluster-ID, X-Server-From,
// X-Server-Version and X-Min-Cluster-Version. A request from another
// cluster is refused with etcd's 412 and text, and a member that the
// cluster has removed gets etcd's 410. Strata members also announce
// their features in a header of their own. etcd ignores it; two Strata
// members use it to choose the snapshot encoding.
//
// # Queueing
//
// Send never blocks the raft goroutine. Each peer has a bounded queue per
// stream (StreamQueue, 4096 messages) and one for the pipeline
// (PipelineQueue, 64).
//
//   - A message that finds its queue full is dropped and counted in
//     etcd_network_peer_sent_failures_total. The peer is reported
//     unreachable to raft, which then probes that follower instead of
//     streaming appends to it. The leader's memory for a lagging follower
//     is therefore bounded by the queues and by raft's MaxSizePerMsg and
//     MaxInflightMsgs.
//   - Heartbeats and votes travel on the message stream, never behind a
//     large MsgApp.
//   - Received messages go to Raft.Process through a queue per peer and
//     stream (RecvQueue), and proposals forwarded to the leader have a
//     queue of their own. A slow Process on one stream therefore never
//     stalls another. While a queue is empty, its reader hands each
//     message straight to raft instead (Offerer), if raft can take it
//     without waiting; a message it cannot take, and every one after it
//     until the queue drains, goes through the queue, so the stream's
//     order holds.
//   - A stream that was up and is lost is dialled again at once (at most
//     one dial per 100 ms, as etcd), so a peer that went away is marked
//     inactive within a round trip. A dial that fails is retried with a
//     backoff that starts at DialRetryMin, doubles up to DialRetryMax,
//     and resets once the stream connects. The backoff is cut short when
//     the peer shows it is up (it dials our stream endpoint, or a
//     pipeline POST goes through either way): members of a new cluster
//     start one after another, and their streams then connect within
//     100 ms of the last one coming up instead of after a backoff, during
//     which every message would go through the pipeline.
//
// # Snapshots
//
// A MsgSnap is sent on its own goroutine, one per peer at a time. Its
// image comes from Snapshots.Open: a page-store image for a Strata peer,
// which Strata sends as zstd(image || xxhash64(image)) (image.go). An
// etcd peer would get the raw bytes. The receiver writes the image to a
// temporary file beside Snapshots.ReceivePath, checks its size (and for
// the compressed encoding its checksum and the end of the stream), and
// fsyncs it. Only then does it rename the file into place and fsync the
// directory, and only after that is the MsgSnap handed to raft. When
// raft sees the snapshot, its image is therefore durable. A failed or
// refused transfer removes the temporary file. Either outcome is
// reported to raft (ReportSnapshot) and to etcd's
// etcd_network_snapshot_send_* and etcd_network_snapshot_receive_*
// metrics.
package transport

package etcdsnap

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
	"github.com/strata-db/strata/version"
)

// Etcd is an etcd snapshot.db of a page store's read view, planned and
// ready to write.
type Etcd struct {
	*Snapshot
	RaftIndex uint64   // meta consistent_index
	RaftTerm  uint64   // meta term
	Members   int      // records in members
	Skipped   []string // Strata's own buckets, which etcd has no use for
	// V2Store is the Data of the raft snapshot that goes with this
	// database to an etcd follower (see V2Store).
	V2Store []byte
}

// EtcdOptions configures PlanEtcd.
type EtcdOptions struct {
	// Observe, if set, sees every record of the data buckets in pass 1
	// (the tools count keys, leases and users with it); an error stops
	// the plan.
	Observe func(bucket, k, v []byte) error
}

// etcdMember is a record of etcd's members bucket: etcd's
// membership.Member as JSON, keyed by the id in hex.
type etcdMember struct {
	ID         uint64   `json:"id"`
	PeerURLs   []string `json:"peerURLs"`
	IsLearner  bool     `json:"isLearner,omitempty"`
	Name       string   `json:"name,omitempty"`
	ClientURLs []string `json:"clientURLs,omitempty"`
}

// etcdConfState is raftpb.ConfState as etcd stores it in meta confState.
type etcdConfState struct {
	Voters    []uint64 `json:"voters"`
	Learners  []uint64 `json:"learners,omitempty"`
	AutoLeave bool     `json:"auto_leave"`
}

// PlanEtcd plans an etcd snapshot.db of what tx sees (pass 1), in etcd
// 3.7's schema:
//
//   - every bucket etcd creates (schema.EtcdBuckets), empty if tx has
//     none;
//   - the data buckets (schema.DataBuckets) as tx holds them, except that
//     meta's consistent_index, term, confState and storageVersion are
//     etcd's: the page store's raft position, the voters and learners of
//     the membership, and the stored storage version (version.Cluster
//     where none is stored);
//   - the membership as etcd keys it (members: id in hex -> member JSON;
//     members_removed: id in hex -> "removed");
//   - cluster: as stored (clusterVersion, downgrade, decided through
//     raft), or clusterVersion -> version.Cluster when nothing is.
//
// Buckets of tx that are Strata's own are left out and listed in
// Skipped. tx must stay open until the snapshot is written.
func PlanEtcd(ctx context.Context, tx *pagestore.Tx, opts EtcdOptions) (*Etcd, error) {
	members, removed, err := membership.Read(tx)
	if err != nil {
		return nil, err
	}
	out := &Etcd{Members: len(members)}
	if out.RaftIndex, out.RaftTerm, err = mvcc.ReadConsistentIndex(tx); err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, b := range schema.EtcdBuckets {
		names[string(b)] = true
	}
	if err := tx.ForEach(func(name []byte, _ *pagestore.Bucket) error {
		switch {
		case schema.IsDataBucket(name):
			names[string(name)] = true
		case bytes.Equal(name, schema.Members), bytes.Equal(name, schema.MembersRemoved):
		case bytes.Equal(name, schema.ConfView):
			// Raft bookkeeping that etcd keeps in its members buckets.
		case bytes.Equal(name, schema.RevMeta):
			// Derived from the key bucket, which is carried over.
		default:
			out.Skipped = append(out.Skipped, string(name))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)

	memberRecs, removedRecs, confState, err := etcdMembership(members, removed)
	if err != nil {
		return nil, err
	}
	storageVersion := []byte(version.Cluster)
	if m, err := tx.Bucket(schema.Meta); err == nil {
		// A member keeps the storage version its cluster is at (it
		// follows a downgrade); a data dir older than that has none.
		v, err := m.Get(schema.MetaStorageVersion)
		if err != nil {
			return nil, err
		}
		if len(v) > 0 {
			storageVersion = bytes.Clone(v)
		}
	} else if !errors.Is(err, pagestore.ErrBucketNotFound) {
		return nil, err
	}
	metaOverrides := []kv{
		{schema.MetaConfState, confState},
		{schema.MetaConsistentIndex, binary.BigEndian.AppendUint64(nil, out.RaftIndex)},
		{schema.MetaStorageVersion, storageVersion},
		{schema.MetaTerm, binary.BigEndian.AppendUint64(nil, out.RaftTerm)},
	}
	sortKVs(metaOverrides)

	clusterVersion := ""
	if b, err := tx.Bucket(schema.Cluster); err == nil {
		if v, err := b.Get(schema.ClusterVersionKey); err == nil && v != nil {
			clusterVersion = string(v)
		}
	}
	v2version := clusterVersion
	if v2version == "" {
		v2version = version.Cluster
	}
	if out.V2Store, err = V2Store(members, removed, v2version); err != nil {
		return nil, err
	}

	buckets := make([]Bucket, 0, len(sorted))
	for _, n := range sorted {
		name := []byte(n)
		var open func() (Records, error)
		switch {
		case n == string(schema.Members):
			open = fixed(memberRecs)
		case n == string(schema.MembersRemoved):
			open = fixed(removedRecs)
		case n == string(schema.Cluster):
			// The stored cluster version and downgrade state, as the
			// cluster decided them through raft; the version Strata runs
			// when none was ever stored.
			open = fixed([]kv{{schema.ClusterVersionKey, []byte(version.Cluster)}})
			if clusterVersion != "" {
				open = func() (Records, error) { return pageRecords(tx, name) }
			}
		case n == string(schema.Meta):
			open = func() (Records, error) {
				src, err := pageRecords(tx, name)
				if err != nil {
					return nil, err
				}
				return &mergeRecords{src: src, over: metaOverrides}, nil
			}
		default:
			open = func() (Records, error) { return pageRecords(tx, name) }
		}
		buckets = append(buckets, Bucket{Name: name, Open: open})
	}
	if opts.Observe != nil {
		for i := range buckets {
			b := &buckets[i]
			if !schema.IsDataBucket(b.Name) {
				continue
			}
			open, name := b.Open, b.Name
			first := true
			b.Open = func() (Records, error) {
				r, err := open()
				if err != nil || !first {
					return r, err
				}
				first = false
				return &observed{Records: r, bucket: name, fn: opts.Observe}, nil
			}
		}
	}
	if out.Snapshot, err = Plan(ctx, buckets); err != nil {
		return nil, err
	}
	return out, nil
}

// etcdMembership converts the membership to etcd's records and confState.
func etcdMembership(members []*membership.Member, removed []uint64) (memberRecs, removedRecs []kv, confState []byte, err error) {
	cs := etcdConfState{Voters: []uint64{}}
	for _, m := range members {
		v, err := json.Marshal(etcdMember{ID: m.ID, PeerURLs: m.PeerURLs, IsLearner: m.IsLearner, Name: m.Name, ClientURLs: m.ClientURLs})
		if err != nil {
			return nil, nil, nil, err
		}
		memberRecs = append(memberRecs, kv{membership.EtcdKey(m.ID), v})
		if m.IsLearner {
			cs.Learners = append(cs.Learners, m.ID)
		} else {
			cs.Voters = append(cs.Voters, m.ID)
		}
	}
	for _, id := range removed {
		removedRecs = append(removedRecs, kv{membership.EtcdKey(id), []byte("removed")})
	}
	sortKVs(memberRecs)
	sortKVs(removedRecs)
	confState, err = json.Marshal(cs)
	return memberRecs, removedRecs, confState, err
}

type kv struct{ k, v []byte }

func sortKVs(s []kv) { sort.Slice(s, func(i, j int) bool { return bytes.Compare(s[i].k, s[j].k) < 0 }) }

// fixed serves records held in memory (sorted).
func fixed(recs []kv) func() (Records, error) {
	return func() (Records, error) { return &sliceRecords{recs: recs}, nil }
}

type sliceRecords struct {
	recs []kv
	i    int
}

func (s *sliceRecords) Next() ([]byte, []byte, bool) {
	if s.i >= len(s.recs) {
		return nil, nil, false
	}
	r := s.recs[s.i]
	s.i++
	return r.k, r.v, true
}

func (s *sliceRecords) Err() error { return nil }

// pageRecords walks a bucket of a page-store transaction; a missing
// bucket has no records.
func pageRecords(tx *pagestore.Tx, name []byte) (Records, error) {
	b, err := tx.Bucket(name)
	if errors.Is(err, pagestore.ErrBucketNotFound) {
		return &sliceRecords{}, nil
	} else if err != nil {
		return nil, err
	}
	return &cursorRecords{c: b.Cursor()}, nil
}

type cursorRecords struct {
	c       *pagestore.Cursor
	started bool
}

func (r *cursorRecords) Next() ([]byte, []byte, bool) {
	var k, v []byte
	if r.started {
		k, v = r.c.Next()
	} else {
		k, v = r.c.First()
		r.started = true
	}
	return k, v, k != nil
}

func (r *cursorRecords) Err() error { return r.c.Err() }

// mergeRecords is src with the records of over (sorted) put in: a key of
// over replaces src's record with that key.
type mergeRecords struct {
	src      Records
	over     []kv
	i        int
	k, v     []byte // src's next record, if have
	have, ok bool
}

func (m *mergeRecords) Next() ([]byte, []byte, bool) {
	if !m.have {
		m.k, m.v, m.ok = m.src.Next()
		m.have = true
	}
	if m.i < len(m.over) {
		o := m.over[m.i]
		c := 1
		if m.ok {
			c = bytes.Compare(m.k, o.k)
		}
		if c >= 0 {
			m.i++
			if c == 0 {
				m.have = false // replaced
			}
			return o.k, o.v, true
		}
	}
	if !m.ok {
		return nil, nil, false
	}
	m.have = false
	return m.k, m.v, true
}

func (m *mergeRecords) Err() error { return m.src.Err() }

// observed shows each record to fn.
type observed struct {
	Records
	bucket []byte
	fn     func(bucket, k, v []byte) error
	err    error
}

func (o *observed) Next() ([]byte, []byte, bool) {
	k, v, ok := o.Records.Next()
	if ok {
		if err := o.fn(o.bucket, k, v); err != nil {
			o.err = fmt.Errorf("record %x: %w", k, err)
			return nil, nil, false
		}
	}
	return k, v, ok
}

func (o *observed) Err() error {
	if o.err != nil {
		return o.err
	}
	return o.Records.Err()
}

package membership

import (
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"

	etcdraft "go.etcd.io/raft/v3"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
)

// Read returns the membership persisted in tx: the members by id, and
// the ids of removed members.
func Read(tx *pagestore.Tx) (members []*Member, removed []uint64, err error) {
	if b, err := tx.Bucket(schema.Members); err == nil {
		if err := b.ForEach(func(k, v []byte) error {
			m, err := ParseJSON(v)
			if err != nil {
				return fmt.Errorf("membership: member %s: %w", k, err)
			}
			members = append(members, m)
			return nil
		}); err != nil {
			return nil, nil, err
		}
	} else if !isBucketNotFound(err) {
		return nil, nil, err
	}
	if b, err := tx.Bucket(schema.MembersRemoved); err == nil {
		if err := b.ForEach(func(k, _ []byte) error {
			id, err := strconv.ParseUint(string(k), 16, 64)
			if err != nil {
				return fmt.Errorf("membership: removed member %q: %w", k, err)
			}
			removed = append(removed, id)
			return nil
		}); err != nil {
			return nil, nil, err
		}
	} else if !isBucketNotFound(err) {
		return nil, nil, err
	}
	sort.Slice(members, func(i, j int) bool { return members[i].ID < members[j].ID })
	return members, removed, nil
}

// Restored is the membership a data dir restored from a snapshot starts
// with (stratautl snapshot restore): the members of --initial-cluster,
// with the ids a new cluster with the same flags would get, as etcdutl's
// restore derives them.
type Restored struct {
	Self, Cluster uint64
	Members       []*Member // by id
}

// NewRestored derives the membership of a restored member named name in
// the initial cluster (name -> peer URLs) with the cluster token.
func NewRestored(name string, initial map[string][]url.URL, token string) (*Restored, error) {
	self, ok := initial[name]
	if !ok {
		return nil, fmt.Errorf("couldn't find local name %q in the initial cluster configuration", name)
	}
	r := &Restored{Self: MemberID(self, token)}
	var ids []uint64
	for n, urls := range initial {
		m := &Member{ID: MemberID(urls, token), Name: n, PeerURLs: URLStrings(urls)}
		r.Members = append(r.Members, m)
		ids = append(ids, m.ID)
	}
	sort.Slice(r.Members, func(i, j int) bool { return r.Members[i].ID < r.Members[j].ID })
	r.Cluster = ClusterID(ids)
	return r, nil
}

// Write replaces the membership persisted in tx with r's: the old
// members and removed members are dropped, as etcdutl's restore drops
// them.
func (r *Restored) Write(tx *pagestore.Tx) error {
	// (The conf view goes too: the restored members buckets are the
	// view, LoadView.)
	for _, name := range [][]byte{schema.Members, schema.MembersRemoved, schema.ConfView} {
		if err := tx.DeleteBucket(name); err != nil && !isBucketNotFound(err) {
			return err
		}
	}
	b, err := tx.CreateBucket(schema.Members)
	if err != nil {
		return err
	}
	if _, err := tx.CreateBucket(schema.MembersRemoved); err != nil {
		return err
	}
	for _, m := range r.Members {
		if err := b.Put(Key(m.ID), m.JSON()); err != nil {
			return err
		}
	}
	return nil
}

// Peers returns the raft peers of the restored cluster, each with its
// member (JSON) as context.
func (r *Restored) Peers() []etcdraft.Peer {
	out := make([]etcdraft.Peer, len(r.Members))
	for i, m := range r.Members {
		out[i] = etcdraft.Peer{ID: m.ID, Context: m.JSON()}
	}
	return out
}

func isBucketNotFound(err error) bool { return errors.Is(err, pagestore.ErrBucketNotFound) }

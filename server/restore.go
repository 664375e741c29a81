package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	etcdraft "go.etcd.io/raft/v3"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/server/config"
)

// RestoredMembership is the membership a data dir restored from a
// snapshot starts with (stratautl snapshot restore): the members of
// --initial-cluster, with the ids a new cluster with the same flags would
// get, as etcdutl's restore derives them.
type RestoredMembership struct {
	Self, Cluster uint64
	Members       []*Member // by id
}

// NewRestoredMembership derives the membership from cfg's Name,
// InitialCluster and InitialClusterToken. cfg must have passed
// config.Parse's bootstrap checks (the name is in the initial cluster,
// whose URLs match --initial-advertise-peer-urls).
func NewRestoredMembership(cfg *config.Config) (*RestoredMembership, error) {
	initial, err := cfg.InitialClusterMap()
	if err != nil {
		return nil, err
	}
	self, ok := initial[cfg.Name]
	if !ok {
		return nil, fmt.Errorf("couldn't find local name %q in the initial cluster configuration", cfg.Name)
	}
	r := &RestoredMembership{Self: memberID(self, cfg.InitialClusterToken)}
	var ids []uint64
	for name, urls := range initial {
		m := &Member{ID: memberID(urls, cfg.InitialClusterToken), Name: name, PeerURLs: urlStrings(urls)}
		r.Members = append(r.Members, m)
		ids = append(ids, m.ID)
	}
	sort.Slice(r.Members, func(i, j int) bool { return r.Members[i].ID < r.Members[j].ID })
	r.Cluster = clusterID(ids)
	return r, nil
}

// Write replaces the membership persisted in tx with r's: the old
// members and removed members are dropped, as etcdutl's restore drops
// them.
func (r *RestoredMembership) Write(tx *pagestore.Tx) error {
	for _, name := range [][]byte{membersBucket, membersRemovedBucket} {
		if err := tx.DeleteBucket(name); err != nil && !isBucketNotFound(err) {
			return err
		}
	}
	b, err := tx.CreateBucket(membersBucket)
	if err != nil {
		return err
	}
	if _, err := tx.CreateBucket(membersRemovedBucket); err != nil {
		return err
	}
	for _, m := range r.Members {
		if err := b.Put(memberKey(m.ID), m.json()); err != nil {
			return err
		}
	}
	return nil
}

// Peers returns the raft peers of the restored cluster, each with its
// member (JSON) as context, the first being the one the restored WAL's
// hard state votes for.
func (r *RestoredMembership) Peers() []etcdraft.Peer {
	out := make([]etcdraft.Peer, len(r.Members))
	for i, m := range r.Members {
		out[i] = etcdraft.Peer{ID: m.ID, Context: m.json()}
	}
	return out
}

// ReadMembership returns the membership persisted in tx: the members by
// id, and the ids of removed members.
func ReadMembership(tx *pagestore.Tx) (members []*Member, removed []uint64, err error) {
	if b, err := tx.Bucket(membersBucket); err == nil {
		if err := b.ForEach(func(k, v []byte) error {
			var mj memberJSON
			if err := json.Unmarshal(v, &mj); err != nil {
				return fmt.Errorf("member %s: %w", k, err)
			}
			members = append(members, &Member{ID: mj.ID, Name: mj.Name, PeerURLs: mj.PeerURLs, ClientURLs: mj.ClientURLs, IsLearner: mj.IsLearner})
			return nil
		}); err != nil {
			return nil, nil, err
		}
	} else if !isBucketNotFound(err) {
		return nil, nil, err
	}
	if b, err := tx.Bucket(membersRemovedBucket); err == nil {
		if err := b.ForEach(func(k, _ []byte) error {
			id, err := strconv.ParseUint(string(k), 16, 64)
			if err != nil {
				return fmt.Errorf("removed member %q: %w", k, err)
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

func isBucketNotFound(err error) bool { return errors.Is(err, pagestore.ErrBucketNotFound) }

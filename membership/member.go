package membership

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// Member is one member of the cluster.
type Member struct {
	ID         uint64
	Name       string
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

// record is a member as persisted: etcd's membership.Member as JSON.
type record struct {
	ID         uint64   `json:"id"`
	Name       string   `json:"name,omitempty"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs,omitempty"`
	IsLearner  bool     `json:"isLearner,omitempty"`
	// IsPromote is set only in the context of a promotion's conf change
	// (etcd's ConfigChangeContext, which embeds the member).
	IsPromote bool `json:"isPromote,omitempty"`
}

// PromoteContext is the context of the conf change that promotes learner
// id, as etcd writes it.
func PromoteContext(id uint64) []byte {
	b, _ := json.Marshal(record{ID: id, IsPromote: true})
	return b
}

// JSON returns the member's record, as persisted and as carried in the
// context of a conf change.
func (m *Member) JSON() []byte {
	b, _ := json.Marshal(record{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
	return b
}

// ParseJSONList decodes a list of member records: a peer's GET /members
// answer, as etcd serves it.
func ParseJSONList(b []byte) ([]*Member, error) {
	var rs []record
	if err := json.Unmarshal(b, &rs); err != nil {
		return nil, err
	}
	out := make([]*Member, 0, len(rs))
	for _, r := range rs {
		out = append(out, &Member{ID: r.ID, Name: r.Name, PeerURLs: r.PeerURLs, ClientURLs: r.ClientURLs, IsLearner: r.IsLearner})
	}
	return out, nil
}

// ParseJSON decodes a member record.
func ParseJSON(b []byte) (*Member, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &Member{ID: r.ID, Name: r.Name, PeerURLs: r.PeerURLs, ClientURLs: r.ClientURLs, IsLearner: r.IsLearner}, nil
}

// Key is the key of member id's records in Strata's page store.
func Key(id uint64) []byte { return []byte(fmt.Sprintf("%016x", id)) }

// EtcdKey is the key etcd gives member id's records (hex, no leading
// zeros).
func EtcdKey(id uint64) []byte { return []byte(fmt.Sprintf("%x", id)) }

// MemberID derives a member's id as etcd does for the members of an
// initial cluster (and, with the time appended to the token, for a member
// added at runtime).
func MemberID(peerURLs []url.URL, token string) uint64 {
	us := make([]string, len(peerURLs))
	for i, u := range peerURLs {
		us[i] = u.String()
	}
	sort.Strings(us)
	h := sha1.Sum([]byte(strings.Join(us, "") + token))
	return binary.BigEndian.Uint64(h[:8])
}

// ClusterID derives the cluster id from the member ids, as etcd does.
func ClusterID(ids []uint64) uint64 {
	s := append([]uint64(nil), ids...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	b := make([]byte, 8*len(s))
	for i, id := range s {
		binary.BigEndian.PutUint64(b[8*i:], id)
	}
	h := sha1.Sum(b)
	return binary.BigEndian.Uint64(h[:8])
}

// URLStrings formats URLs as members keep them.
func URLStrings(us []url.URL) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.String()
	}
	return out
}

package auth

import (
	"bytes"
	"sort"

	"go.etcd.io/etcd/api/v3/authpb"
)

// A rangeSet is a union of half-open key intervals [begin, end), kept
// sorted and merged so a permission check is one binary search. It
// replaces etcd's interval tree: the question asked is always "is this
// whole interval covered by the union?", and a merged sorted list answers
// that exactly, including coverage by adjacent permissions ([a,b) and
// [b,c) together cover [a,c)), which is what etcd's Contains accepts.
//
// Keys compare as etcd's "bytes affine" order: an empty slice is +inf,
// so an end of nil means "to the end of the key space". A rangeSet is
// immutable once built; readers share it without locks.
type rangeSet []interval

type interval struct {
	begin, end []byte // end empty = +inf
}

// affineCmp orders keys with the empty key as +inf.
func affineCmp(a, b []byte) int {
	switch {
	case len(a) == 0 && len(b) == 0:
		return 0
	case len(a) == 0:
		return 1
	case len(b) == 0:
		return -1
	}
	return bytes.Compare(a, b)
}

// pointEnd is the smallest key after k: the end of the one-key interval.
func pointEnd(k []byte) []byte {
	e := make([]byte, len(k)+1)
	copy(e, k)
	return e
}

// isOpenEnded reports etcd's "from key to the end" marker, range_end "\x00".
func isOpenEnded(rangeEnd []byte) bool { return len(rangeEnd) == 1 && rangeEnd[0] == 0 }

// permInterval is the interval a stored permission grants: a single key
// when range_end is empty, [key, +inf) when range_end is "\x00", else
// [key, range_end).
func permInterval(p *authpb.Permission) interval {
	switch {
	case len(p.RangeEnd) == 0:
		return interval{p.Key, pointEnd(p.Key)}
	case isOpenEnded(p.RangeEnd):
		return interval{p.Key, nil}
	default:
		return interval{p.Key, p.RangeEnd}
	}
}

// newRangeSet sorts and merges ivs. Empty or inverted intervals grant
// nothing and are dropped.
func newRangeSet(ivs []interval) rangeSet {
	in := ivs[:0:0]
	for _, iv := range ivs {
		if affineCmp(iv.begin, iv.end) < 0 {
			in = append(in, iv)
		}
	}
	sort.Slice(in, func(i, j int) bool { return affineCmp(in[i].begin, in[j].begin) < 0 })
	var out rangeSet
	for _, iv := range in {
		if n := len(out); n > 0 && affineCmp(iv.begin, out[n-1].end) <= 0 {
			if affineCmp(iv.end, out[n-1].end) > 0 {
				out[n-1].end = iv.end
			}
			continue
		}
		out = append(out, iv)
	}
	return out
}

// covers reports whether [begin, end) lies wholly inside the set. An
// empty or inverted request interval is never covered, as in etcd.
func (s rangeSet) covers(begin, end []byte) bool {
	if affineCmp(begin, end) >= 0 {
		return false
	}
	// The last merged interval starting at or before begin is the only
	// one that can contain it.
	i := sort.Search(len(s), func(i int) bool { return affineCmp(s[i].begin, begin) > 0 }) - 1
	if i < 0 {
		return false
	}
	return affineCmp(begin, s[i].end) < 0 && affineCmp(end, s[i].end) <= 0
}

// userPerms is one user's merged permissions, rebuilt on every auth
// change (see state.rebuildPerms).
type userPerms struct {
	root        bool // has the root role: every key, and admin RPCs
	read, write rangeSet
}

// requestInterval turns a request's (key, range_end) into the interval it
// touches: one key when range_end is empty, to +inf when it is "\x00".
func requestInterval(key, rangeEnd []byte) (begin, end []byte) {
	switch {
	case len(rangeEnd) == 0:
		return key, pointEnd(key)
	case isOpenEnded(rangeEnd):
		return key, nil
	default:
		return key, rangeEnd
	}
}

// isValidPermissionRange is etcd's rule for a grantable permission: a
// non-empty key, and a range_end that is empty (one key), "\x00" (from
// key), or after key.
func isValidPermissionRange(key, rangeEnd []byte) bool {
	if len(key) == 0 {
		return false
	}
	if len(rangeEnd) == 0 || isOpenEnded(rangeEnd) {
		return true
	}
	return affineCmp(key, rangeEnd) < 0
}

package pagestore

import "sort"

// extent is a run of n pages starting at start.
type extent struct {
	start pgid
	n     uint64
}

func (e extent) end() pgid { return e.start + pgid(e.n) }

// freeSet is a set of pages kept as sorted, non-overlapping, non-adjacent
// extents. Allocation takes the lowest pages first, which keeps the file's
// live data packed towards its start and makes online defrag cheap.
type freeSet struct {
	ext   []extent
	count uint64 // total pages in ext
}

// find returns the index of the first extent whose end is > id.
func (s *freeSet) find(id pgid) int {
	return sort.Search(len(s.ext), func(i int) bool { return s.ext[i].end() > id })
}

// contains reports whether page id is in the set.
func (s *freeSet) contains(id pgid) bool {
	i := s.find(id)
	return i < len(s.ext) && s.ext[i].start <= id
}

// add inserts [start, start+n). It returns false, changing nothing, if any
// of those pages is already in the set (a double free: corruption).
func (s *freeSet) add(start pgid, n uint64) bool {
	if n == 0 {
		return true
	}
	end := start + pgid(n)
	i := s.find(start)
	if i < len(s.ext) && s.ext[i].start < end {
		return false
	}
	mergePrev := i > 0 && s.ext[i-1].end() == start
	mergeNext := i < len(s.ext) && s.ext[i].start == end
	switch {
	case mergePrev && mergeNext:
		s.ext[i-1].n += n + s.ext[i].n
		s.ext = append(s.ext[:i], s.ext[i+1:]...)
	case mergePrev:
		s.ext[i-1].n += n
	case mergeNext:
		s.ext[i].start = start
		s.ext[i].n += n
	default:
		s.ext = append(s.ext, extent{})
		copy(s.ext[i+1:], s.ext[i:])
		s.ext[i] = extent{start, n}
	}
	s.count += n
	return true
}

// remove deletes [start, start+n), which must lie within one extent; it
// returns false, changing nothing, otherwise.
func (s *freeSet) remove(start pgid, n uint64) bool {
	if n == 0 {
		return true
	}
	i := s.find(start)
	if i >= len(s.ext) || s.ext[i].start > start || s.ext[i].end() < start+pgid(n) {
		return false
	}
	e := s.ext[i]
	before := extent{e.start, uint64(start - e.start)}
	after := extent{start + pgid(n), uint64(e.end() - start - pgid(n))}
	switch {
	case before.n == 0 && after.n == 0:
		s.ext = append(s.ext[:i], s.ext[i+1:]...)
	case before.n == 0:
		s.ext[i] = after
	case after.n == 0:
		s.ext[i] = before
	default:
		s.ext = append(s.ext, extent{})
		copy(s.ext[i+2:], s.ext[i+1:])
		s.ext[i] = before
		s.ext[i+1] = after
	}
	s.count -= n
	return true
}

// alloc takes n contiguous pages, the lowest run that fits.
func (s *freeSet) alloc(n uint64) (pgid, bool) {
	for i := range s.ext {
		if s.ext[i].n >= n {
			start := s.ext[i].start
			s.remove(start, n)
			return start, true
		}
	}
	return 0, false
}

// fitsBelow reports whether n contiguous free pages exist that end at or
// below limit.
func (s *freeSet) fitsBelow(n uint64, limit pgid) bool {
	for _, e := range s.ext {
		if e.start+pgid(n) > limit {
			return false
		}
		if e.n >= n {
			return true
		}
	}
	return false
}

// countBelow is the number of free pages below limit.
func (s *freeSet) countBelow(limit pgid) uint64 {
	var n uint64
	for _, e := range s.ext {
		if e.start >= limit {
			break
		}
		n += uint64(min(e.end(), limit) - e.start)
	}
	return n
}

// clip removes every page >= hwm.
func (s *freeSet) clip(hwm pgid) {
	for len(s.ext) > 0 {
		last := &s.ext[len(s.ext)-1]
		if last.start >= hwm {
			s.count -= last.n
			s.ext = s.ext[:len(s.ext)-1]
			continue
		}
		if last.end() > hwm {
			s.count -= uint64(last.end() - hwm)
			last.n = uint64(hwm - last.start)
		}
		return
	}
}

func (s *freeSet) clone() *freeSet {
	return &freeSet{ext: append([]extent(nil), s.ext...), count: s.count}
}

// toExtents sorts ids and merges adjacent ones into extents. ids holds
// extents already; overlapping input is left for the caller's checks.
func normalize(in []extent) []extent {
	if len(in) == 0 {
		return nil
	}
	sort.Slice(in, func(i, j int) bool { return in[i].start < in[j].start })
	out := []extent{in[0]}
	for _, e := range in[1:] {
		last := &out[len(out)-1]
		if last.end() == e.start {
			last.n += e.n
		} else {
			out = append(out, e)
		}
	}
	return out
}

package wal

import (
	"fmt"
	"path/filepath"
)

// Purge removes segments that lie wholly before snapIndex, oldest first,
// while more than MaxWALs segments remain; the newest segment is never
// removed. A segment lies wholly before snapIndex when the next segment's
// first index is at or below it: every entry the segment still holds
// precedes that first index, and the marker of the snapshot at snapIndex
// was written after entry snapIndex, so it is in a later segment that
// stays. It returns the paths it removed.
func (w *WAL) Purge(snapIndex uint64) ([]string, error) {
	keep := w.opts.MaxWALs
	if keep < 0 {
		return nil, nil
	}
	w.segMu.Lock()
	defer w.segMu.Unlock()
	var removed []string
	for len(w.segs) > keep && len(w.segs) > 1 && w.segs[1].firstIndex <= snapIndex {
		victim := w.segs[0]
		if err := w.fs.Remove(victim.path); err != nil {
			return removed, fmt.Errorf("wal: purge %s: %w", victim.path, err)
		}
		removed = append(removed, victim.path)
		w.segs = w.segs[1:]
	}
	if len(removed) > 0 {
		if err := w.fs.SyncDir(w.dir); err != nil {
			return removed, err
		}
		w.log.Info("purged WAL segments", "count", len(removed), "oldest-kept", filepath.Base(w.segs[0].path))
	}
	return removed, nil
}

// Segments returns the paths of the segments on disk, oldest first.
func (w *WAL) Segments() []string {
	w.segMu.Lock()
	defer w.segMu.Unlock()
	out := make([]string, len(w.segs))
	for i, s := range w.segs {
		out[i] = s.path
	}
	return out
}

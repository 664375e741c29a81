// Package tools holds the logic of stratautl, Strata's offline tools: WAL
// inspection, offline defrag and snapshot handling. cmd/stratautl only
// parses flags and calls in here, so the tools can be tested directly.
package tools

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/strata-db/strata/progress"
	"github.com/strata-db/strata/wal"
)

// ResolveWALDir accepts a WAL directory or a data directory (whose WAL is
// member/wal, as etcd lays it out) and returns the WAL directory.
func ResolveWALDir(dir string) string {
	if st, err := os.Stat(filepath.Join(dir, "member", "wal")); err == nil && st.IsDir() {
		return filepath.Join(dir, "member", "wal")
	}
	return dir
}

// WALDumpOptions select what WALDump prints.
type WALDumpOptions struct {
	Dir       string // WAL or data directory
	FromIndex uint64 // first entry index to print (0: from the start)
	ToIndex   uint64 // last entry index to print (0: to the end)
	Type      string // "", "entry", "state" or "snapshot"
	KeyPrefix string // only entries touching a key with this prefix
	Format    string // "table" (default) or "json" (one object per line)
}

// WALRow is one printed record.
type WALRow struct {
	File      string   `json:"file"`
	Offset    int64    `json:"offset"`
	Type      string   `json:"type"`
	Index     uint64   `json:"index,omitempty"`
	Term      uint64   `json:"term,omitempty"`
	EntryType string   `json:"entry_type,omitempty"`
	Size      int      `json:"size"`
	Request   *Request `json:"decoded,omitempty"`
	Vote      uint64   `json:"vote,omitempty"`
	Commit    uint64   `json:"commit,omitempty"`
	Summary   string   `json:"-"`
}

// WALDump prints the records of a WAL. A corrupt record stops it with an
// error naming the file and offset; a torn tail is noted at the end.
func WALDump(o WALDumpOptions, out io.Writer) error {
	switch o.Type {
	case "", "entry", "state", "snapshot":
	default:
		return fmt.Errorf("--type must be entry, state or snapshot, not %q", o.Type)
	}
	switch o.Format {
	case "", "table", "json":
	default:
		return fmt.Errorf("-w must be table or json, not %q", o.Format)
	}
	dir := ResolveWALDir(o.Dir)
	var tw *tabwriter.Writer
	enc := json.NewEncoder(out)
	if o.Format != "json" {
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "INDEX\tTERM\tTYPE\tSIZE\tREQUEST\tSUMMARY")
	}
	count := 0
	torn, err := wal.Iterate(nil, dir, func(pos wal.Position, rec wal.Record) error {
		row, ok, err := walRow(pos, rec, o)
		if err != nil || !ok {
			return err
		}
		count++
		if tw == nil {
			return enc.Encode(row)
		}
		idx, term, kind := "-", "-", "-"
		if row.Index != 0 || row.Type != "state" {
			idx, term = fmt.Sprint(row.Index), fmt.Sprint(row.Term)
		}
		if row.Request != nil {
			kind = row.Request.Kind
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", idx, term, row.Type, row.Size, kind, row.Summary)
		return nil
	})
	if tw != nil {
		tw.Flush()
	}
	if err != nil {
		return err
	}
	if tw != nil {
		fmt.Fprintf(out, "\n%d records", count)
		if torn != nil {
			fmt.Fprintf(out, "; torn tail at %s offset %d (%s), discarded on next open", torn.File, torn.Offset, torn.Reason)
		}
		fmt.Fprintln(out)
	}
	return nil
}

// walRow decodes one record and applies the filters.
func walRow(pos wal.Position, rec wal.Record, o WALDumpOptions) (WALRow, bool, error) {
	row := WALRow{File: filepath.Base(pos.File), Offset: pos.Offset, Type: rec.Type.String(), Size: len(rec.Data)}
	if o.Type != "" && o.Type != row.Type {
		return row, false, nil
	}
	switch rec.Type {
	case wal.TypeEntry:
		e, err := wal.DecodeEntry(rec)
		if err != nil {
			return row, false, fmt.Errorf("%s offset %d: %w", pos.File, pos.Offset, err)
		}
		row.Index, row.Term = e.GetIndex(), e.GetTerm()
		row.EntryType = e.GetType().String()
		if (o.FromIndex != 0 && row.Index < o.FromIndex) || (o.ToIndex != 0 && row.Index > o.ToIndex) {
			return row, false, nil
		}
		req := DescribeEntry(e)
		row.Request = &req
		row.Summary = req.Summary
		if req.Error != "" {
			row.Summary = "undecodable: " + req.Error
		}
		if o.KeyPrefix != "" && !touchesPrefix(req, o.KeyPrefix) {
			return row, false, nil
		}
	case wal.TypeState:
		st, err := wal.DecodeState(rec)
		if err != nil {
			return row, false, fmt.Errorf("%s offset %d: %w", pos.File, pos.Offset, err)
		}
		if o.KeyPrefix != "" {
			return row, false, nil
		}
		row.Term, row.Vote, row.Commit = st.GetTerm(), st.GetVote(), st.GetCommit()
		row.Summary = fmt.Sprintf("term=%d vote=%x commit=%d", st.GetTerm(), st.GetVote(), st.GetCommit())
	case wal.TypeSnapshot:
		s, err := wal.DecodeSnapshot(rec)
		if err != nil {
			return row, false, fmt.Errorf("%s offset %d: %w", pos.File, pos.Offset, err)
		}
		if o.KeyPrefix != "" || (o.FromIndex != 0 && s.Index < o.FromIndex) || (o.ToIndex != 0 && s.Index > o.ToIndex) {
			return row, false, nil
		}
		row.Index, row.Term = s.Index, s.Term
		row.Summary = fmt.Sprintf("voters=%v learners=%v", s.ConfState.GetVoters(), s.ConfState.GetLearners())
	}
	return row, true, nil
}

func touchesPrefix(r Request, prefix string) bool {
	for _, k := range r.Keys {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// WALVerifyResult summarizes a verified WAL.
type WALVerifyResult struct {
	Segments  int
	Records   int
	Entries   int
	FirstIdx  uint64
	LastIdx   uint64 // index of the last entry record, in log order
	SnapIdx   uint64 // index of the last snapshot marker
	TornTail  *wal.TornTail
	BytesRead int64

	// Set by WALVerifyDataDir: the page store it was compared with.
	DBPath          string
	ConsistentIndex uint64
}

// LastIndex is the last index the WAL holds, as a restarting member sees
// it: its last entry's, or its last snapshot marker's when no entry
// follows the marker. (An entry after an earlier entry with a higher index
// replaced that tail, so the last entry written is the log's last.)
func (r *WALVerifyResult) LastIndex() uint64 { return max(r.LastIdx, r.SnapIdx) }

// WALVerify reads every record of every segment and checks it as Open
// would. It returns an error matching wal.ErrCorrupt, naming the file and
// offset, if the log is corrupt. A torn tail is reported, not an error:
// the server truncates it on start.
func WALVerify(dir string, showProgress bool) (*WALVerifyResult, error) {
	dir = ResolveWALDir(dir)
	segs, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		return nil, err
	}
	if len(segs) == 0 {
		return nil, fmt.Errorf("%w in %s", wal.ErrNotFound, dir)
	}
	var bar *progress.Bar
	if showProgress {
		bar = progress.New("verify", int64(len(segs)), "segments")
	}
	res := &WALVerifyResult{Segments: len(segs)}
	lastFile := ""
	torn, err := wal.Iterate(nil, dir, func(pos wal.Position, rec wal.Record) error {
		if pos.File != lastFile {
			lastFile = pos.File
			if bar != nil {
				bar.Add(1)
			}
		}
		res.Records++
		res.BytesRead += int64(rec.StoredSize)
		if rec.Type == wal.TypeEntry {
			e, err := wal.DecodeEntry(rec)
			if err != nil {
				return &wal.CorruptError{File: pos.File, Offset: pos.Offset, Reason: err.Error()}
			}
			if res.Entries == 0 {
				res.FirstIdx = e.GetIndex()
			}
			res.Entries++
			res.LastIdx = e.GetIndex()
		}
		if rec.Type == wal.TypeSnapshot {
			snap, err := wal.DecodeSnapshot(rec)
			if err != nil {
				return &wal.CorruptError{File: pos.File, Offset: pos.Offset, Reason: err.Error()}
			}
			res.SnapIdx = snap.Index
		}
		return nil
	})
	if bar != nil {
		bar.Finish()
	}
	res.TornTail = torn
	return res, err
}

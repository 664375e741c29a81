package tools

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/strata-db/strata/btreeidx"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/progress"
	"github.com/strata-db/strata/vfs"
)

// ResolveDBPath accepts a data dir (whose page store is member/snap/db)
// or the path of a db file, and returns the db file's path.
func ResolveDBPath(target string) string {
	if st, err := os.Stat(target); err == nil && st.IsDir() {
		return filepath.Join(target, "member", "snap", "db")
	}
	return target
}

// DBCheckOptions configure DBCheck.
type DBCheckOptions struct {
	// Progress, if set, gets a progress bar over the pages checked.
	Progress io.Writer
	// MaxProblems bounds the problems listed (default 100).
	MaxProblems int
}

// DBCheck checks a page store completely and read-only (see
// pagestore.CheckFile): target is a data dir or a db file. Corruption is
// in the report; the error is for a file that could not be checked
// (missing, or in use by a running member).
func DBCheck(target string, o DBCheckOptions) (*pagestore.CheckReport, error) {
	path := ResolveDBPath(target)
	var bar *progress.Bar
	opts := &pagestore.CheckOptions{MaxProblems: o.MaxProblems}
	if o.Progress != nil {
		opts.Progress = func(done, total int64) {
			if bar == nil {
				bar = progress.NewTo(o.Progress, "checking", total, "pages")
			}
			bar.Set(done)
		}
	}
	rep, err := pagestore.CheckFile(path, opts)
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		if errors.Is(err, pagestore.ErrDatabaseLocked) {
			return nil, fmt.Errorf("%w: a running member (or stratautl defrag) has it open; stop it first: "+
				"pages a running member reuses could change under the check and be reported as corrupt", err)
		}
		return nil, err
	}
	if rep.OK() {
		// The pages are sound: check what Strata derives from the
		// records too (the revision metadata, which a member trusts on
		// open instead of reading the records).
		db, err := pagestore.Open(path, &pagestore.Options{ReadOnly: true})
		if err != nil {
			return nil, err
		}
		err = db.View(mvcc.CheckRevMeta)
		db.Close()
		if errors.Is(err, pagestore.ErrCorrupt) {
			rep.Problems = append(rep.Problems, pagestore.Problem{Page: -1, Offset: -1, What: err.Error()})
		} else if err != nil {
			return nil, err
		}
	}
	// The key index's base beside the page store (mvcc/indexbase.go),
	// checked as a member opening it checks it. A damaged one loses
	// nothing (a member does not use it: it reads every record and
	// writes a new one), but it is reported, as it says the disk
	// damaged a file.
	base := path + ".index"
	if _, err := os.Stat(base); err == nil {
		if _, err := btreeidx.OpenBase(vfs.Default, base); err != nil {
			rep.Problems = append(rep.Problems, pagestore.Problem{Page: -1, Offset: -1,
				What: err.Error() + " (the member does not use it: it reads every record at its next start and writes a new base)"})
		}
	}
	return rep, nil
}

// WriteDBCheckReport prints a report for people: the verdict, each
// problem with the file and offset, then the summary.
func WriteDBCheckReport(w io.Writer, r *pagestore.CheckReport) {
	if r.OK() {
		fmt.Fprintf(w, "%s: OK\n", r.Path)
	} else {
		n := len(r.Problems) + r.Omitted
		fmt.Fprintf(w, "%s: CORRUPT: %d problem%s\n", r.Path, n, plural(n))
		for _, p := range r.Problems {
			if p.Offset >= 0 {
				fmt.Fprintf(w, "  %s offset %d (page %d): %s\n", r.Path, p.Offset, p.Page, p.What)
			} else {
				fmt.Fprintf(w, "  %s: %s\n", r.Path, p.What)
			}
		}
		if r.Omitted > 0 {
			fmt.Fprintf(w, "  ... and %d more (raise --max-problems to list them)\n", r.Omitted)
		}
	}
	if r.PageSize == 0 {
		return // nothing could be read
	}
	fmt.Fprintf(w, "  file:      %s, page size %d, tx %d\n", progress.Bytes(r.FileSize), r.PageSize, r.TxID)
	fmt.Fprintf(w, "  pages:     %d (meta %d, branch %d, leaf %d, overflow %d, freelist %d, free %d)\n",
		r.Pages, r.MetaPages, r.BranchPages, r.LeafPages, r.OverflowPages, r.FreelistPages, r.FreePages)
	if r.FreeListUnreadable {
		fmt.Fprintf(w, "  free:      unknown: the freelist log could not be read, so free and leaked pages were not checked\n")
	} else if r.TreeUnreadable {
		fmt.Fprintf(w, "  leaks:     not checked: a tree page could not be read, so the pages below it were not reached\n")
	}
	fmt.Fprintf(w, "  in use:    %s (%d bytes), leaf fill %.0f%%\n", progress.Bytes(r.InUseBytes), r.InUseBytes, r.LeafFill*100)
	names := make([]string, 0, len(r.BucketKeys))
	for n := range r.BucketKeys {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %d", n, r.BucketKeys[n]))
	}
	fmt.Fprintf(w, "  buckets:   %d (keys: %s)\n", r.Buckets, strings.Join(parts, ", "))
	fmt.Fprintf(w, "  keys:      %d (values stored compressed: %d)\n", r.Keys, r.CompressedValues)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

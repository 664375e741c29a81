package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/strata-db/strata/tools"
)

// The output formats of the commands etcdutl also has (snapshot status,
// hashkv), byte for byte as etcdutl 3.7 prints them: simple (comma
// separated), table (the box table of olekukonko/tablewriter as etcdutl
// configures it), json and fields; protobuf is refused as etcdutl
// refuses it.

// checkFormat refuses a -w value etcdutl does not know, with etcdutl's
// message and status. extra are stratautl's own formats the command
// also takes.
func checkFormat(f string, extra ...string) error {
	switch f {
	case "simple", "table", "json", "fields", "protobuf":
		return nil
	}
	for _, e := range extra {
		if f == e {
			return nil
		}
	}
	return codedError{exitBadFeature, errors.New("unsupported output format")}
}

// errProtobuf is etcdutl's answer to -w protobuf for a status or hashkv,
// which have no protobuf message.
var errProtobuf = codedError{exitBadFeature, errors.New("protobuf not supported as output format")}

// statusTable is etcdutl's snapshot status table.
func statusTable(st *tools.SnapshotStatus) (hdr []string, row []string) {
	return []string{"hash", "revision", "total keys", "total size", "version"},
		[]string{fmt.Sprintf("%x", st.Hash), fmt.Sprint(st.Revision), fmt.Sprint(st.TotalKey), humanBytes(uint64(st.TotalSize)), st.Version}
}

// hashKVTable is etcdutl's hashkv table.
func hashKVTable(h *tools.HashKVResult) (hdr []string, row []string) {
	return []string{"hash", "hash revision", "compact revision"},
		[]string{fmt.Sprint(h.Hash), fmt.Sprint(h.HashRevision), fmt.Sprint(h.CompactRevision)}
}

// printStatus prints a snapshot status in one of etcdutl's formats.
func printStatus(w io.Writer, format string, st *tools.SnapshotStatus) error {
	hdr, row := statusTable(st)
	switch format {
	case "simple":
		fmt.Fprintln(w, strings.Join(row, ", "))
	case "table":
		renderTable(w, hdr, [][]string{row})
	case "json":
		return printJSON(w, struct {
			Hash      uint32 `json:"hash"`
			Revision  int64  `json:"revision"`
			TotalKey  int    `json:"totalKey"`
			TotalSize int64  `json:"totalSize"`
			Version   string `json:"version"`
		}{st.Hash, st.Revision, st.TotalKey, st.TotalSize, st.Version})
	case "fields":
		fmt.Fprintln(w, `"Hash" :`, st.Hash)
		fmt.Fprintln(w, `"Revision" :`, st.Revision)
		fmt.Fprintln(w, `"Keys" :`, st.TotalKey)
		fmt.Fprintln(w, `"Size" :`, st.TotalSize)
		fmt.Fprintln(w, `"Version" :`, st.Version)
	case "protobuf":
		return errProtobuf
	default:
		return codedError{exitBadFeature, errors.New("unsupported output format")}
	}
	return nil
}

// printHashKV prints a HashKV in one of etcdutl's formats.
func printHashKV(w io.Writer, format string, h *tools.HashKVResult) error {
	hdr, row := hashKVTable(h)
	switch format {
	case "simple":
		fmt.Fprintln(w, strings.Join(row, ", "))
	case "table":
		renderTable(w, hdr, [][]string{row})
	case "json":
		return printJSON(w, h)
	case "fields":
		fmt.Fprintln(w, `"Hash" :`, h.Hash)
		fmt.Fprintln(w, `"Hash revision" :`, h.HashRevision)
		fmt.Fprintln(w, `"Compact revision" :`, h.CompactRevision)
	case "protobuf":
		return errProtobuf
	default:
		return codedError{exitBadFeature, errors.New("unsupported output format")}
	}
	return nil
}

// printJSON prints v as one line of compact JSON, as etcdutl does.
func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// humanBytes prints a size in SI units as etcdutl prints sizes (go-humanize's
// Bytes): under 10 as "N B"; otherwise scaled by the largest power of
// 1000 not above it, rounded half up to one decimal, which is shown only
// below 10 ("1.0 kB", "16 kB", "1000 kB" for 999,999). The power is taken
// as floor(log(n)/log(1000)) in floating point, as the library takes it,
// so that values near a power of 1000 print as etcdutl prints them.
func humanBytes(n uint64) string {
	if n < 10 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"B", "kB", "MB", "GB", "TB", "PB", "EB"}
	e := math.Floor(math.Log(float64(n)) / math.Log(1000))
	v := math.Floor(float64(n)/math.Pow(1000, e)*10+0.5) / 10
	if v < 10 {
		return fmt.Sprintf("%.1f %s", v, units[int(e)])
	}
	return fmt.Sprintf("%.0f %s", v, units[int(e)])
}

// renderTable draws rows under a header as etcdutl's tables look: a box
// of light line-drawing characters, the header upper-cased and centred
// (an odd space left over goes to the right), cells right-aligned, one
// space of padding on each side of every cell.
func renderTable(w io.Writer, hdr []string, rows [][]string) {
	head := make([]string, len(hdr))
	widths := make([]int, len(hdr))
	for i, h := range hdr {
		head[i] = strings.ToUpper(strings.TrimSpace(strings.ReplaceAll(h, "_", " ")))
		widths[i] = utf8.RuneCountInString(head[i])
	}
	for _, r := range rows {
		for i := range hdr {
			if i < len(r) {
				widths[i] = max(widths[i], utf8.RuneCountInString(r[i]))
			}
		}
	}
	line := func(left, mid, right string) string {
		var b strings.Builder
		b.WriteString(left)
		for i, wd := range widths {
			if i > 0 {
				b.WriteString(mid)
			}
			b.WriteString(strings.Repeat("─", wd+2))
		}
		b.WriteString(right)
		return b.String()
	}
	cells := func(vals []string, align func(s string, width int) string) string {
		var b strings.Builder
		b.WriteString("│")
		for i, wd := range widths {
			v := ""
			if i < len(vals) {
				v = vals[i]
			}
			b.WriteString(" " + align(v, wd) + " │")
		}
		return b.String()
	}
	center := func(s string, width int) string {
		gap := width - utf8.RuneCountInString(s)
		return strings.Repeat(" ", gap/2) + s + strings.Repeat(" ", gap-gap/2)
	}
	right := func(s string, width int) string {
		return strings.Repeat(" ", width-utf8.RuneCountInString(s)) + s
	}
	fmt.Fprintln(w, line("┌", "┬", "┐"))
	fmt.Fprintln(w, cells(head, center))
	fmt.Fprintln(w, line("├", "┼", "┤"))
	for _, r := range rows {
		fmt.Fprintln(w, cells(r, right))
	}
	fmt.Fprintln(w, line("└", "┴", "┘"))
}

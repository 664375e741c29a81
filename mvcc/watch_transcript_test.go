package mvcc

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the watch transcripts in testdata/watch")

// TestWatchTranscripts runs the transcripts in testdata/watch: each block
// is a command, a "----" line and the output it must print, ended by a
// blank line. -rewrite regenerates the outputs. One store and one stream
// per file. Commands:
//
//	put KEY VALUE | del KEY [END] | compact REV
//	watch [id=N] key=K [end=E] [start=S] [prev_kv] [noput] [nodelete] [progress_notify]
//	cancel ID | progress | recv [N] | none
func TestWatchTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/watch/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runTranscript(t, f) })
	}
}

func runTranscript(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := openWatchStore(t, WatchConfig{})
	ws := ts.NewWatchStream()
	defer ws.Close()
	var out bytes.Buffer
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		cmd := line
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command without ----", path, i+1)
		}
		i += 2
		var want []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			want = append(want, lines[i])
		}
		got := transcriptCmd(t, ts, ws, cmd)
		if !*rewrite && got != strings.Join(want, "\n") {
			t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", path, cmd, got, strings.Join(want, "\n"))
		}
		fmt.Fprintf(&out, "%s\n----\n%s\n", cmd, got)
		if i < len(lines) {
			out.WriteString("\n")
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, bytes.TrimRight(out.Bytes(), "\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString("\n")
		f.Close()
	}
}

func transcriptCmd(t *testing.T, ts *watchTestStore, ws *WatchStream, cmd string) string {
	f := strings.Fields(cmd)
	arg := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	switch f[0] {
	case "put":
		return fmt.Sprintf("rev %d", ts.put(arg(1), arg(2)))
	case "del":
		return fmt.Sprintf("rev %d", ts.del(arg(1), arg(2)))
	case "compact":
		rev, _ := strconv.ParseInt(arg(1), 10, 64)
		ts.compact(rev)
		return "ok"
	case "watch":
		var r WatchRequest
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "id":
				n, _ := strconv.ParseInt(v, 10, 64)
				r.ID = WatchID(n)
			case "key":
				r.Key = []byte(unquote(v))
			case "end":
				r.End = []byte(unquote(v))
			case "start":
				r.StartRev, _ = strconv.ParseInt(v, 10, 64)
			case "prev_kv":
				r.PrevKV = true
			case "noput":
				r.Filters = append(r.Filters, pb.WatchCreateRequest_NOPUT)
			case "nodelete":
				r.Filters = append(r.Filters, pb.WatchCreateRequest_NODELETE)
			case "progress_notify":
				r.ProgressNotify = true
			default:
				t.Fatalf("unknown watch option %q", kv)
			}
		}
		id, err := ws.Watch(r)
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("id %d", id)
	case "cancel":
		n, _ := strconv.ParseInt(arg(1), 10, 64)
		if err := ws.Cancel(WatchID(n)); err != nil {
			return "error: " + err.Error()
		}
		return "ok"
	case "progress":
		return fmt.Sprintf("synced %v", ws.RequestProgress())
	case "recv":
		n := 1
		if arg(1) != "" {
			n, _ = strconv.Atoi(arg(1))
		}
		var lines []string
		for ; n > 0; n-- {
			lines = append(lines, fmtTranscriptResp(recv(t, ws)))
		}
		return strings.Join(lines, "\n")
	case "none":
		select {
		case r := <-ws.Chan():
			return "unexpected " + fmtTranscriptResp(r)
		case <-time.After(50 * time.Millisecond):
			return "none"
		}
	}
	t.Fatalf("unknown command %q", cmd)
	return ""
}

// unquote turns \x00 in a transcript argument into the byte.
func unquote(s string) string { return strings.ReplaceAll(s, `\x00`, "\x00") }

func fmtTranscriptResp(r WatchResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "id=%d rev=%d", r.WatchID, r.Revision)
	if r.Created {
		b.WriteString(" created")
	}
	if r.Canceled {
		b.WriteString(" canceled")
	}
	if r.CompactRevision != 0 {
		fmt.Fprintf(&b, " compact_revision=%d", r.CompactRevision)
	}
	if r.CancelReason != "" {
		fmt.Fprintf(&b, " reason=%q", r.CancelReason)
	}
	if r.IsProgressNotify() {
		b.WriteString(" progress")
	}
	for _, e := range r.Events {
		b.WriteString("\n  " + fmtEvent(e))
	}
	return b.String()
}

package wal

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

const (
	killChildEnv = "STRATA_WAL_KILL_CHILD_DIR"
	killSegSize  = 128 << 10
	killEntry    = 200
)

// TestKillLoop runs a child process that appends from several goroutines
// and prints each acknowledged index, SIGKILLs it at random moments, and
// after every kill reopens the WAL: every acknowledged index must be
// there, the log must be contiguous from 1, and every payload intact.
func TestKillLoop(t *testing.T) {
	if os.Getenv(killChildEnv) != "" {
		t.Skip("child mode")
	}
	kills := 50
	if testing.Short() {
		kills = 10
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("STRATA_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed=%d (replay with STRATA_SEED)", seed)
	rng := rand.New(rand.NewSource(seed))
	dir := t.TempDir()
	maxAcked := uint64(0)
	total := 0
	for k := 0; k < kills; k++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillLoopChild$", "-test.v=false")
		cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acks := make(chan uint64, 1024)
		go func() {
			defer close(acks)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "ack "); ok {
					n, _ := strconv.ParseUint(v, 10, 64)
					acks <- n
				}
			}
		}()
		// Kill once the child has acknowledged something, at a random
		// moment up to 60 ms later.
		var acked []uint64
		deadline := time.After(10 * time.Second)
	wait:
		for {
			select {
			case a, ok := <-acks:
				if !ok {
					break wait
				}
				acked = append(acked, a)
				if len(acked) == 1 {
					go func(d time.Duration) {
						time.Sleep(d)
						cmd.Process.Signal(syscall.SIGKILL)
					}(time.Duration(rng.Int63n(int64(60 * time.Millisecond))))
				}
			case <-deadline:
				cmd.Process.Kill()
				t.Fatal("child acknowledged nothing within 10s")
			}
		}
		cmd.Wait()
		for _, a := range acked {
			if a > maxAcked {
				maxAcked = a
			}
		}
		total += len(acked)

		w, err := Open(dir, Snapshot{}, &Options{SegmentSize: killSegSize})
		if err != nil {
			t.Fatalf("kill %d: reopen: %v", k, err)
		}
		_, st, ents, _ := w.ReadAll()
		w.Close()
		last := uint64(len(ents))
		if last < maxAcked {
			t.Fatalf("kill %d: log ends at %d but %d was acknowledged", k, last, maxAcked)
		}
		checkEntries(t, ents, 1, last, killEntry)
		if st.GetCommit() > last {
			t.Fatalf("kill %d: hard state commits %d beyond last entry %d", k, st.GetCommit(), last)
		}
	}
	t.Logf("%d kills, %d acknowledged appends, all recovered (highest %d)", kills, total, maxAcked)
}

// TestKillLoopChild is the child of TestKillLoop: it appends until killed.
func TestKillLoopChild(t *testing.T) {
	dir := os.Getenv(killChildEnv)
	if dir == "" {
		t.Skip("only runs as TestKillLoop's child")
	}
	opts := &Options{SegmentSize: killSegSize}
	var w *WAL
	var err error
	if Exist(nil, dir) {
		w, err = Open(dir, Snapshot{}, opts)
	} else {
		w, err = Create(dir, []byte("kill-loop"), opts)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	next := uint64(1)
	if w.recovered != nil {
		_, _, ents, _ := w.ReadAll()
		next = uint64(len(ents)) + 1
	}
	var mu sync.Mutex // orders index assignment with enqueueing
	var outMu sync.Mutex
	stdout := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				idx := next
				next++
				f := w.SaveAsync(mkState(1, idx-1), []*raftpb.Entry{mkEntry(idx, 1, killEntry)})
				mu.Unlock()
				if err := f.Wait(); err != nil {
					if errors.Is(err, ErrClosed) {
						return
					}
					fmt.Fprintln(os.Stderr, "child append:", err)
					os.Exit(4)
				}
				outMu.Lock()
				fmt.Fprintf(stdout, "ack %d\n", idx)
				stdout.Flush()
				outMu.Unlock()
			}
		}()
	}
	wg.Wait()
}

package pagestore

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-db/strata/internal/testseed"
)

const killChildEnv = "STRATA_PAGESTORE_KILL_CHILD"

const (
	killBatch = 50 // keys per transaction
	killKeep  = 20 // transactions kept; older batches are deleted
)

func killKey(txid uint64, i int) []byte {
	k := make([]byte, 12)
	binary.BigEndian.PutUint64(k, txid)
	binary.BigEndian.PutUint32(k[8:], uint32(i))
	return k
}

func killValue(txid uint64, i int) []byte {
	n := 20 + int(txid*31+uint64(i)*7)%400
	if i == 0 {
		n = 6000 // an overflow value in every batch
	}
	v := make([]byte, n)
	for j := range v {
		v[j] = byte(txid) ^ byte(i) ^ byte(j)
	}
	return v
}

// killChild commits batches forever, printing each acknowledged txid.
func killChild(path string) {
	// With the preallocator, so kills also land during zero-filling.
	db, err := Open(path, &Options{Preallocate: true})
	if err != nil {
		fmt.Println("open error:", err)
		os.Exit(2)
	}
	for {
		var id uint64
		err := db.Update(func(tx *Tx) error {
			id = tx.ID()
			data, err := tx.CreateBucketIfNotExists([]byte("data"))
			if err != nil {
				return err
			}
			for i := 0; i < killBatch; i++ {
				if err := data.Put(killKey(id, i), killValue(id, i)); err != nil {
					return err
				}
			}
			if id > killKeep {
				for i := 0; i < killBatch; i++ {
					if err := data.Delete(killKey(id-killKeep, i)); err != nil {
						return err
					}
				}
			}
			m, err := tx.CreateBucketIfNotExists([]byte("meta"))
			if err != nil {
				return err
			}
			return m.Put([]byte("last"), []byte(strconv.FormatUint(id, 10)))
		})
		if err != nil {
			fmt.Println("commit error:", err)
			os.Exit(2)
		}
		fmt.Printf("committed %d\n", id)
	}
}

// TestKillLoop re-executes the test binary as a child that commits batches
// and prints each acknowledged txid, SIGKILLs it at a random moment, and
// checks after each kill that the file opens at the last acknowledged
// commit or later, passes the checker, and holds exactly the batches of
// the last killKeep transactions, each complete.
func TestKillLoop(t *testing.T) {
	if path := os.Getenv(killChildEnv); path != "" {
		killChild(path)
		return
	}
	iterations := 50
	if s := os.Getenv("STRATA_PAGESTORE_KILLS"); s != "" {
		iterations, _ = strconv.Atoi(s)
	}
	path := tmpDB(t)
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 1)) // the kill moments
	var lastAck uint64
	for it := 0; it < iterations; it++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillLoop$", "-test.count=1")
		cmd.Env = append(os.Environ(), killChildEnv+"="+path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acks := make(chan uint64, 1024)
		done := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			var other []string
			for sc.Scan() {
				line := sc.Text()
				if s, ok := strings.CutPrefix(line, "committed "); ok {
					if id, err := strconv.ParseUint(s, 10, 64); err == nil {
						acks <- id
						continue
					}
				}
				other = append(other, line)
			}
			close(acks)
			done <- strings.Join(other, "\n")
		}()
		// Wait for the child to commit at least once, then kill it at a
		// random moment, usually in the middle of a commit.
		select {
		case id, ok := <-acks:
			if !ok {
				cmd.Wait()
				t.Fatalf("iteration %d: child exited early: %s", it, <-done)
			}
			lastAck = max(lastAck, id)
		case <-time.After(20 * time.Second):
			t.Fatalf("iteration %d: child made no commit", it)
		}
		time.Sleep(time.Duration(rng.IntN(40_000)) * time.Microsecond)
		cmd.Process.Signal(syscall.SIGKILL)
		for id := range acks {
			lastAck = max(lastAck, id)
		}
		cmd.Wait()
		if s := <-done; strings.Contains(s, "error") {
			t.Fatalf("iteration %d: child reported: %s", it, s)
		}

		db, err := Open(path, &Options{StrictMode: true})
		if err != nil {
			t.Fatalf("iteration %d: reopen after kill: %v", it, err)
		}
		checkDB(t, db)
		err = db.View(func(tx *Tx) error {
			if tx.ID() < lastAck {
				return fmt.Errorf("reopened at tx %d, but tx %d was acknowledged", tx.ID(), lastAck)
			}
			m, err := tx.Bucket([]byte("meta"))
			if err != nil {
				return err
			}
			v, err := m.Get([]byte("last"))
			if err != nil {
				return err
			}
			last, _ := strconv.ParseUint(string(v), 10, 64)
			if last != tx.ID() {
				return fmt.Errorf("last batch %d, meta txid %d", last, tx.ID())
			}
			data, err := tx.Bucket([]byte("data"))
			if err != nil {
				return err
			}
			counts := map[uint64]int{}
			err = data.ForEach(func(k, v []byte) error {
				id, i := binary.BigEndian.Uint64(k), int(binary.BigEndian.Uint32(k[8:]))
				if string(v) != string(killValue(id, i)) {
					return fmt.Errorf("batch %d key %d: wrong value", id, i)
				}
				if id > last || id+killKeep <= last {
					return fmt.Errorf("batch %d present at tx %d", id, last)
				}
				counts[id]++
				return nil
			})
			if err != nil {
				return err
			}
			if counts[last] != killBatch {
				return fmt.Errorf("last batch %d has %d keys", last, counts[last])
			}
			for id, n := range counts {
				if n != killBatch {
					return fmt.Errorf("batch %d has %d of %d keys (torn transaction)", id, n, killBatch)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		db.Close()
	}
	t.Logf("%d kills, last acknowledged tx %d", iterations, lastAck)
}
